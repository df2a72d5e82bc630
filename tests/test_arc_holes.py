"""The holes of issue 15, each as a hostile program that succeeded before the fix.

Victims are real processes: a ``sleep`` owned by the uid the sandbox used to run every
worker's programs under (65534), standing in for another worker's program, and the
verifier's own helpers. Each test asserts the victim is untouched and that ordinary
programs run beside the attacker (in one batch, several workers) give their usual results.
"""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from verifiers.arc import ArcExecutor, ArcTask

TASK = ArcTask.from_json({
    "train": [{"input": [[1, 2], [3, 4]], "output": [[4, 3], [2, 1]]}],
    "test": [{"input": [[5, 6], [7, 1]], "output": [[1, 7], [6, 5]]}],
}, "holes")
FLIP = "def transform(g):\n    return [row[::-1] for row in g[::-1]]\n"
CTYPES = "import sys\nctypes = sys.modules['ctypes']\nlibc = ctypes.CDLL(None, use_errno=True)\n"
ROOT = os.geteuid() == 0
NOBODY = 65534


def _victim() -> subprocess.Popen:
    """A process like another worker's program: owned by nobody when we are root."""
    return subprocess.Popen(["sleep", "600"], user=NOBODY if ROOT else None)


def _fcntl_attack(victim: int) -> str:
    # F_SETSIG=10 SIGKILL, F_SETOWN=8 victim, F_SETFL=4 O_ASYNC|O_NONBLOCK on the result
    # pipe: the kernel sends SIGKILL to the owner when the worker reads the pipe.
    return CTYPES + (
        "def transform(g):\n"
        "    rc = [libc.fcntl(3, 10, 9), libc.fcntl(3, 8, %d), libc.fcntl(3, 4, 0o20000 | 0o4000)]\n"
        "    sys.modules['os'].write(3, b' ')\n"  # a byte without newline: the worker reads it
        "    return [[min(9, abs(x)) for x in rc]]\n" % victim)


@pytest.fixture(scope="module")
def executor():
    with ArcExecutor(workers=2) as ex:
        yield ex


def _assert_alive(p: subprocess.Popen) -> None:
    try:
        p.wait(timeout=0.5)  # reaps it if the attack killed it; alive: times out
    except subprocess.TimeoutExpired:
        return
    pytest.fail(f"victim {p.pid} was killed (returncode {p.returncode})")


def test_fcntl_cannot_send_signals(executor):
    victim = _victim()
    try:
        batch = [FLIP + f"# {i}\nX = {i}\n" for i in range(6)]
        batch[2] = _fcntl_attack(victim.pid)
        results = executor.execute_many(TASK, batch)
        _assert_alive(victim)
        for i, r in enumerate(results):
            if i != 2:
                assert r.train[0].correct and r.test[0].correct, r
    finally:
        victim.kill()
        victim.wait()
