"""Clean stops: every ratchet command ends on SIGTERM or SIGINT without a stack dump.

SIGTERM is what `systemctl stop`, `docker stop`, Kubernetes and `ray job stop` send; SIGINT is
Ctrl-C. Ray's core installs a failure-signal handler that answers SIGTERM with `*** SIGTERM
received ***` and a native stack dump, and Python answers Ctrl-C with a KeyboardInterrupt
traceback. A command calls `raise_on_stop_signals()` after `ray.init` (which is when Ray
installs its handler): the first signal then raises `Stopped` in the main thread, the
command's own `finally`/`except` blocks record the run's status and shut Ray down, and later
signals are ignored so that this clean-up is not cut short (SIGKILL still ends it).

Exit codes: a workload stopped this way exits 128 + the signal's number (143 for SIGTERM, 130
for SIGINT), as a shell reports a process the signal ended, so a supervisor sees that the run
did not finish; `ratchet serve` exits 0, since stopping is the end of a server's work.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Stopped(BaseException):  # noqa: N818 (a stop, like KeyboardInterrupt, not an error)
    """The first SIGTERM or SIGINT. A BaseException, as KeyboardInterrupt is, so a job's
    `except Exception` cannot swallow it."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"stopped by {self.name}")

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _raise_stopped(signum: int, frame: FrameType | None) -> None:
    for s in STOP_SIGNALS:  # a second signal must not interrupt the status write and shutdown
        signal.signal(s, signal.SIG_IGN)
    raise Stopped(signum)


def raise_on_stop_signals() -> dict[int, Any] | None:
    """Install the handlers; returns the previous ones (for `restore`), or None outside the main
    thread, where Python cannot set signal handlers (a library caller keeps its own)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for s in STOP_SIGNALS:
        signal.signal(s, _raise_stopped)
    return previous


def restore(previous: dict[int, Any] | None) -> None:
    """Put back the handlers `raise_on_stop_signals` replaced (after a run that ended by itself)."""
    for s, handler in (previous or {}).items():
        signal.signal(s, handler)


def wait_for_stop_signal() -> None:
    """Block the main thread until a stop signal raises `Stopped` (install the handlers first)."""
    while True:
        signal.pause()
