"""Model-version registry: version -> checkpoint, lineage, metrics; an atomic "current" pointer.

A version is registered only once its checkpoint is complete (training publishes after
saving and validating), so a failed run leaves nothing half-written here.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from store import keys
from store.records import dumps, loads


@dataclass
class ModelVersion:
    version: str  # "v0", "v1", ...
    checkpoint: str  # a Hugging Face checkpoint directory (or URI) every node can read
    parent: str | None = None  # version it was trained from, None for a base/seed model
    created: float = 0.0
    metrics: dict[str, Any] = field(default_factory=dict)  # training metrics
    note: str = ""


class ModelRegistry:
    def __init__(self, client: redis.Redis, experiment: str):
        self.client = client
        self.experiment = experiment
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
    ) -> ModelVersion:
        """Register a finished checkpoint as a new version (and make it current, atomically)."""
        if not checkpoint:
            raise ValueError("checkpoint path is empty")
        if parent is not None and not self.client.hexists(self._versions, parent):
            raise KeyError(f"parent version {parent!r} is not registered in {self.experiment!r}")
        number = int(self.client.incr(self._counter)) - 1
        mv = ModelVersion(f"v{number}", str(checkpoint), parent, time.time(), metrics or {}, note)
        pipe = self.client.pipeline(transaction=True)  # MULTI/EXEC: entry and pointer together
        pipe.hset(self._versions, mv.version, dumps(asdict(mv)))
        if make_current:
            pipe.set(self._current, mv.version)
        pipe.execute()
        return mv

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
