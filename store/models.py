"""Model-version registry: version -> checkpoint, lineage, metrics; an atomic "current" pointer.

A version is registered only once its checkpoint is complete (training publishes after
saving and validating), so a failed run leaves nothing half-written here. Each version
records the sha256 of every file of its checkpoint: a sampler checks them before it loads
the version (`verify_files`), so a checkpoint replaced or damaged after publishing (another
experiment writing to the same path, a partial copy) fails loudly instead of being served.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import redis

from store import keys
from store.lease import fence_gone
from store.records import dumps, loads


@dataclass
class ModelVersion:
    version: str  # "v0", "v1", ...
    checkpoint: str  # a Hugging Face checkpoint directory (or URI) every node can read
    parent: str | None = None  # version it was trained from, None for a base/seed model
    created: float = 0.0
    metrics: dict[str, Any] = field(default_factory=dict)  # training metrics
    note: str = ""
    files: dict[str, str] = field(default_factory=dict)  # relative path -> sha256, at publish ({}: unknown)


class CheckpointChanged(ValueError):
    """A checkpoint's files no longer match the hashes recorded when it was published."""


def file_hashes(path: str | os.PathLike[str]) -> dict[str, str]:
    """sha256 of every regular file under a checkpoint directory, by relative path."""
    root = Path(path)
    out: dict[str, str] = {}
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        h = hashlib.sha256()
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        out[f.relative_to(root).as_posix()] = h.hexdigest()
    return out


def verify_files(path: str | os.PathLike[str], files: dict[str, str], what: str = "checkpoint") -> None:
    """Raise CheckpointChanged, naming the files, unless every recorded file has its recorded hash."""
    if not files:
        return
    root = Path(path)
    missing = sorted(f for f in files if not (root / f).is_file())
    if missing:
        raise CheckpointChanged(f"{what} {root}: files recorded at publish are missing: {missing[:5]}; "
                                "the checkpoint was moved or damaged: publish it again, or restore it")
    actual = file_hashes(root)
    changed = sorted(f for f, h in files.items() if actual.get(f) != h)
    if changed:
        raise CheckpointChanged(
            f"{what} {root}: {changed[:5]} differ from the hashes recorded at publish; something replaced "
            "or changed the checkpoint after it was published (another run writing to the same path?). "
            "Refusing to load it: publish it as a new version, or restore the original files."
        )


def relocated(version: ModelVersion, checkpoint: str) -> ModelVersion | None:
    """`version` read from `checkpoint` instead, when that directory holds the very files the
    version was published with; None when it does not (or nothing was hashed at publish).
    A seed inside a job's working dir moves with each Ray session: submitted again to a new
    head (the old one lost), the same files are unpacked under another path."""
    if version.checkpoint == checkpoint:
        return version
    if not version.files or not Path(checkpoint).is_dir():
        return None
    actual = file_hashes(checkpoint)
    same = all(actual.get(f) == h for f, h in version.files.items())
    return replace(version, checkpoint=str(Path(checkpoint).resolve())) if same else None


class ModelRegistry:
    def __init__(self, client: redis.Redis, experiment: str, fence: tuple[str, int] | None = None):
        self.client = client
        self.experiment = experiment
        self.fence = fence  # (fence counter key, this driver's token): publishing aborts once it moved
        self._versions = keys.exp(experiment, "models")
        self._current = keys.exp(experiment, "models", "current")
        self._counter = keys.exp(experiment, "models", "next")

    def publish(
        self,
        checkpoint: str,
        parent: str | None = None,
        metrics: dict[str, Any] | None = None,
        note: str = "",
        make_current: bool = True,
        files: dict[str, str] | None = None,
    ) -> ModelVersion:
        """Register a finished checkpoint as a new version (and make it current, atomically).

        `files`: relative path -> sha256 of the checkpoint's files (see file_hashes), checked
        by samplers before they load the version."""
        if not checkpoint:
            raise ValueError("checkpoint path is empty")
        if parent is not None and not self.client.hexists(self._versions, parent):
            raise KeyError(f"parent version {parent!r} is not registered in {self.experiment!r}")
        # One MULTI/EXEC for the version number, the entry and the pointer: a Redis kill
        # mid-publish leaves all or nothing, so no number is burnt and a retry publishes the
        # same "vN". The counter is WATCHed: another publish in between, or a connection lost
        # at EXEC (redis-py raises WatchError), reads it again.
        pipe = self.client.pipeline(transaction=True)
        mv, record, broken = None, b"", 0
        try:
            while True:
                try:
                    pipe.watch(self._counter, *([self.fence[0]] if self.fence is not None else []))
                    if self.fence is not None:
                        fence = pipe.get(self.fence[0])
                        if fence is None:
                            raise fence_gone(self.fence[0])
                        if int(fence) != self.fence[1]:
                            raise self._lost()  # a driver whose lease was taken over publishes nothing
                    if mv is not None and pipe.hget(self._versions, mv.version) == record:
                        return mv  # the last try's EXEC landed; only its reply was lost
                    number = int(pipe.get(self._counter) or 0)
                    mv = ModelVersion(f"v{number}", str(checkpoint), parent, time.time(), metrics or {}, note,
                                      dict(files or {}))
                    record = dumps(asdict(mv))
                    pipe.multi()
                    pipe.set(self._counter, number + 1)
                    pipe.hset(self._versions, mv.version, record)
                    if make_current:
                        pipe.set(self._current, mv.version)
                    pipe.execute()
                    return mv
                except redis.WatchError as e:
                    # Another publish moved the counter: read it again (a moved fence raises). A
                    # connection that broke while watching is retried twice, then surfaces.
                    if "while watching" in str(e):  # redis-py: "A ConnectionError occurred (on) while watching"
                        broken += 1
                        if broken > 2:
                            raise redis.ConnectionError(f"the connection to Redis broke {broken} times while "
                                                        f"publishing ({e}); nothing was published") from None
        finally:
            pipe.reset()

    def _lost(self) -> Exception:
        from store.lease import LeaseLost

        return LeaseLost(f"experiment {self.experiment!r}: this driver's lease was taken over by another "
                         "driver, so it published nothing. Stop this driver; the other one carries on.")

    def get(self, version: str) -> ModelVersion:
        raw = self.client.hget(self._versions, version)
        if raw is None:
            raise KeyError(f"model version {version!r} is not registered in {self.experiment!r}")
        return ModelVersion(**loads(raw))

    def current(self) -> ModelVersion | None:
        version = self.client.get(self._current)
        return None if version is None else self.get(version.decode())

    def set_current(self, version: str) -> ModelVersion:
        mv = self.get(version)
        self.client.set(self._current, version)
        return mv

    def list(self) -> list[ModelVersion]:
        versions = [ModelVersion(**loads(v)) for v in self.client.hvals(self._versions)]
        return sorted(versions, key=lambda m: int(m.version[1:]))
