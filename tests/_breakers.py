"""Ways the tests break real parts at a named point (a process killed, an engine failed)."""

from __future__ import annotations

import os
import signal


def kill_zygote_before_replies(ex, times: int | None) -> list[int]:
    """Break the executor's one worker at the named point: SIGKILL its zygote after a program
    was sent and before its reply is read (the first `times` replies; None: every one)."""
    [worker] = ex._all
    real, kills = worker._recv_run, []

    def recv(timeout_s):
        if times is None or len(kills) < times:
            kills.append(worker.pid)
            os.kill(worker.pid, signal.SIGKILL)
        return real(timeout_s)

    worker._recv_run = recv
    return kills
