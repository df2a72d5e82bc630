"""Fail points: named places in a job where a fault drill's fault lands by construction.

A drill (drills/chaos.py, drills/cluster_demo.py) that kills "the node training the model"
by looking for a process at some moment races the job: the training may be over, or not
started, and the kill silently does not happen. Here the job itself stops at the place:

    failpoint("training_checkpoint")      # in the job: a no-op unless a drill armed it

    points = FailPoints(Path("/tmp/drill"))  # in the drill; the job's processes get points.env
    points.arm("training_checkpoint")
    hit = points.wait_hit("training_checkpoint", running=job_running)   # {"pid": ..., "host": ...}
    os.kill(hit["pid"], signal.SIGKILL)   # or points.release(...) to let it go on

Only a process whose environment names a drill directory (RATCHET_FAILPOINT_DIR) looks at
all; then a point stops the first process that reaches it after the drill armed it (the claim
is an atomic rename: exactly one process wins), and no other: a resumed training, or a
replacement actor, passes. The stopped process writes who it is (pid, host, what it was
doing) and blocks reading a FIFO until the drill releases it or kills it. One machine (or a
directory every node shares): the drills' clusters run on this machine.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENV_DIR = "RATCHET_FAILPOINT_DIR"
POLL_S = 0.1  # how often the drill looks for a hit while the job runs


def failpoint(name: str, **context: Any) -> None:
    """Stop here if a drill armed `name`: announce this process, then wait to be killed or released."""
    base = os.environ.get(ENV_DIR)
    if not base:
        return
    folder = Path(base)
    try:
        os.rename(folder / f"{name}.armed", folder / f"{name}.claimed-{os.getpid()}")
    except FileNotFoundError:  # not armed, or another process took it
        return
    hit = {"point": name, "pid": os.getpid(), "host": socket.gethostname(), "at": time.time(), **context}
    tmp = folder / f".{name}.hit-{os.getpid()}"
    tmp.write_text(json.dumps(hit, default=str))
    os.replace(tmp, folder / f"{name}.hit")  # whole or absent for the drill that reads it
    with open(folder / f"{name}.release", "rb") as fifo:  # blocks until the drill opens it to write
        fifo.read()


class FailPoints:
    """The drill's side: arm points, wait for the process that stops at one, release it."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    @property
    def env(self) -> dict[str, str]:
        """What the job's processes need in their environment to look at the points."""
        return {ENV_DIR: str(self.folder)}

    def arm(self, name: str) -> None:
        """The next process to reach `name` stops there (once: the point disarms as it is taken)."""
        if not name.replace("_", "").isalnum():
            raise ValueError(f"fail point names are letters, digits and _, got {name!r}")
        release = self.folder / f"{name}.release"
        if not release.exists():
            os.mkfifo(release)
        (self.folder / f"{name}.hit").unlink(missing_ok=True)
        (self.folder / f"{name}.armed").touch()

    def armed(self, name: str) -> bool:
        return (self.folder / f"{name}.armed").exists()

    def hit(self, name: str) -> dict[str, Any] | None:
        """The process stopped at `name` (pid, host, context), or None while none is."""
        try:
            return json.loads((self.folder / f"{name}.hit").read_text())
        except FileNotFoundError:
            return None

    def wait_hit(self, name: str, running: Callable[[], bool]) -> dict[str, Any] | None:
        """Wait until a process stops at `name`, while `running()` holds (e.g. the job runs):
        None when it stopped holding first, i.e. the job never reached the point."""
        while (found := self.hit(name)) is None and running():
            time.sleep(POLL_S)  # polling a file the job writes once
        return found if found is not None else self.hit(name)

    def disarm(self, name: str) -> bool:
        """Take an unclaimed point back; False when a process already took it."""
        try:
            (self.folder / f"{name}.armed").unlink()
            return True
        except FileNotFoundError:
            return False

    def release(self, name: str) -> None:
        """Let the process stopped at `name` go on; ProcessLookupError when none waits there."""
        try:
            fd = os.open(self.folder / f"{name}.release", os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:  # ENXIO: no reader, i.e. nobody stopped there (or it was killed)
            raise ProcessLookupError(f"no process waits at fail point {name!r}") from e
        os.close(fd)
