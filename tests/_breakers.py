"""Ways the tests break real parts at a named point (a process killed, an engine failed)."""

from __future__ import annotations

import os
import signal


def kill_zygote_as_programs_arrive(ex, times: int | None) -> list[int]:
    """Break the executor's one worker at the named point: SIGKILL its zygote once its task is
    loaded and just before a program is sent (the first `times` programs; None: every one).
    Before, not after: a zygote killed after the send may already have written its reply
    (its child is forked ahead), and a reply in the pipe is a result, not a lost worker."""
    [worker] = ex._all
    real, kills = worker._send_code, []

    def send(code):
        if times is None or len(kills) < times:
            kills.append(worker.pid)
            os.kill(worker.pid, signal.SIGKILL)
        return real(code)

    worker._send_code = send
    return kills


def fail_first_transaction(monkeypatch, *, after_exec: bool = False) -> list[int]:
    """Break Redis at the named point, on the first MULTI/EXEC a pipeline sends: before it
    reaches the server (redis-server killed between a command sent before the transaction
    and the transaction: a ConnectionError), or `after_exec`, once the server applied it but
    its reply was lost (redis-py reports a connection lost while WATCHing as a WatchError).
    Returns the calls seen."""
    import redis

    real, calls = redis.client.Pipeline.execute, []

    def execute(self, *args, **kwargs):
        calls.append(1)
        if len(calls) > 1:
            return real(self, *args, **kwargs)
        if not after_exec:
            self.reset()  # as redis-py leaves a pipeline whose connection died
            raise redis.ConnectionError("redis-server killed before EXEC (test breaker)")
        real(self, *args, **kwargs)
        raise redis.WatchError("A ConnectionError occurred while watching one or more keys (test breaker)")

    monkeypatch.setattr(redis.client.Pipeline, "execute", execute)
    return calls


def kill_zygote_as_it_starts(monkeypatch, times: int = 1) -> list[int]:
    """Break a sandbox worker at the named point: SIGKILL its zygote just after it was
    spawned, before it read its configuration and answered "ready" (the first `times` starts)."""
    from verifiers.arc.sandbox import SandboxWorker

    real, kills = SandboxWorker._send, []

    def send(worker, obj):
        if "allowed_modules" in obj and len(kills) < times:  # start()'s first frame
            kills.append(worker.pid)
            os.kill(worker.pid, signal.SIGKILL)
        return real(worker, obj)

    monkeypatch.setattr(SandboxWorker, "_send", send)
    return kills
