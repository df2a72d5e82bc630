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
import tempfile
from pathlib import Path

import pytest

from common.procs import memory_holds
from verifiers.arc import ArcExecutor, ArcTask
from verifiers.arc.sandbox import SandboxLimits, SandboxWorker, decode_run

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
        f"    rc = [libc.fcntl(3, 10, 9), libc.fcntl(3, 8, {victim}),"
        " libc.fcntl(3, 4, 0o20000 | 0o4000)]\n"
        "    sys.modules['os'].write(3, b' ')\n"  # a byte without newline: the worker reads it
        "    return [[min(9, abs(x)) for x in rc]]\n")


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


def test_stat_with_a_path_sees_nothing(executor):
    # newfstatat(AT_FDCWD, path, buf, AT_EMPTY_PATH) passes the seccomp rule for fstat, and
    # the kernel resolves the non-empty path: this read a file's size before the fix.
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        os.chmod(d, 0o755)  # searchable by anyone, as /etc is
        secret = Path(d) / "secret"
        secret.write_bytes(b"x" * 7)
        secret.chmod(0o600)
        _check_stat_blocked(executor, secret)


def _check_stat_blocked(executor: ArcExecutor, secret: Path) -> None:
    program = CTYPES + (
        "def transform(g):\n"
        "    buf = ctypes.create_string_buffer(256)\n"
        f"    rc = libc.syscall(262, -100, {str(secret).encode()!r}, buf, 0x1000)\n"  # newfstatat
        "    size = int.from_bytes(buf.raw[48:56], 'little')\n"
        "    return [[1 if rc == 0 else 0, min(size, 9)]]\n")
    results = executor.execute_many(TASK, [program, FLIP])
    assert results[0].test[0].status == "ok", results[0]
    assert results[0].test[0].output == ((0, 0),)
    assert results[1].test[0].correct


def test_each_worker_runs_programs_under_its_own_uid():
    program = ("import sys\nos = sys.modules['os']\n"
               "def transform(g):\n    return [[int(c) for c in str(os.getuid())]]\n")
    workers = [SandboxWorker(), SandboxWorker()]
    try:
        uids = []
        for w in workers:
            [result] = decode_run(w.run("k", [[[0]]], SandboxLimits(), program), 1)
            assert result.status == "ok", result
            uids.append(int("".join(map(str, result.output[0]))))
    finally:
        for w in workers:
            w.close()
    if not ROOT:
        pytest.skip("uids are per worker only when the verifier runs as root")
    assert len(set(uids)) == 2, uids
    assert not {0, NOBODY} & set(uids), uids


def _cached(store, ex: ArcExecutor, code: str) -> list:
    from store import code_hash

    return store.exec_cache.get_many([(ex.fingerprint(TASK), code_hash(code))])


def test_wall_timeout_within_cpu_budget_is_not_cached(store):
    # wall allowance 0.1 x CPU allowance: a spinning program runs out of wall time with
    # most of its CPU budget left, as any program does on a machine too busy to run it.
    spin = "def transform(g):\n    while True:\n        pass\n"
    with ArcExecutor(cache=store.exec_cache, transient_retries=0,  # each call: one run
                     limits=SandboxLimits(setup_cpu_s=2.0, wall_factor=0.1)) as ex:
        first = ex.execute(TASK, spin)
        assert first.train[0].status == "timeout"
        assert first.train[0].error_type == "WallTimeout"
        assert not any(_cached(store, ex, spin))
        again = ex.execute(TASK, spin)
        assert not again.cached and ex.executed == 2
    # a CPU timeout is the program's own (wall allowance 50x: CPU runs out first, even on a
    # machine shared with other work)
    with ArcExecutor(cache=store.exec_cache, limits=SandboxLimits(wall_factor=50.0)) as ex:
        assert ex.execute(TASK, spin).train[0].error_type == "Timeout"
        assert any(_cached(store, ex, spin))


def _signal_child_of(zygote: int, sig: int, besides: int) -> None:
    """Wait (bounded) for the zygote's one program child (not ``besides``) and signal it."""
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with open(f"/proc/{zygote}/task/{zygote}/children") as f:
            kids = [k for k in f.read().split() if int(k) != besides]
        if kids:
            os.kill(int(kids[0]), sig)
            return
    raise AssertionError("the program never started")


@pytest.mark.parametrize("sig,error_type", [(signal.SIGKILL, "Killed"),
                                            (signal.SIGTERM, "Signalled")])
def test_death_by_a_signal_from_outside_is_not_cached(store, sig, error_type):
    import threading

    sleeper = "import time\ndef transform(g):\n    time.sleep(1000)\n"
    # transient_retries=0: the signalled run's own outcome (a retry would run it again)
    with ArcExecutor(cache=store.exec_cache, limits=SandboxLimits(setup_cpu_s=5.0), transient_retries=0) as ex:
        ex.ping()  # started, no child yet
        [worker] = ex._all
        killer = threading.Thread(target=_signal_child_of,
                                  args=(worker.pid, sig, worker.info["scipy_zygote"]))
        killer.start()
        result = ex.execute(TASK, sleeper)
        killer.join()
        assert result.train[0].error_type == error_type, result.train[0]
        assert not any(_cached(store, ex, sleeper))


def test_programs_code_and_outputs_do_not_stay_in_the_worker():
    # Every child is a fork of the worker: what the worker's heap still holds of an earlier
    # program (freed, not erased), every later program can read with ctypes.string_at.
    import random as _random

    secret = f"PROGRAM-SECRET-{os.urandom(8).hex()}"
    rng = _random.Random(secret)
    row = "".join(rng.choice("0123456789") for _ in range(30))
    program = (f"# {secret}\nROW = [int(c) for c in {row!r}]\n"
               "def transform(g):\n    return [ROW, ROW[::-1]]\n")
    worker = SandboxWorker()
    try:
        [first, _] = decode_run(worker.run("k", [[[1]], [[2]]], SandboxLimits(), program), 2)
        assert first.status == "ok" and "".join(map(str, first.output[0])) == row
        decode_run(worker.run("k", [[[1]], [[2]]], SandboxLimits(), FLIP), 2)
        worker.ping()  # every child reaped
        # the worker's writable memory: its heap, where a program's freed text and outputs would stay
        leaked = [n for n in (secret.encode(), row.encode(), row[::-1].encode())
                  if memory_holds(worker.pid, n, writable=True)]
    finally:
        worker.close()
    assert not leaked, leaked


LINENO = "import sys\n{pad}def transform(g):\n    return [[sys._getframe().f_lineno % 10]]\n"


def test_programs_that_share_a_hash_share_their_result_whichever_runs_first():
    # Two programs that differ only in blank lines and comments have one cache key; their
    # result must not depend on which of them happened to run first.
    from store import code_hash

    a = LINENO.format(pad="")
    b = LINENO.format(pad="# a comment\n\n\n\n")
    assert code_hash(a) == code_hash(b)
    with ArcExecutor() as ex:
        only_a = ex.execute(TASK, a)
    with ArcExecutor() as ex:
        only_b = ex.execute(TASK, b)
    assert only_a.train[0].status == "ok"
    assert only_a.train[0].output == only_b.train[0].output


def test_programs_live_in_a_pid_namespace_of_their_own(executor):
    # getppid() is 0 when the parent is outside the caller's PID namespace (the worker), and
    # 1 for programs of the scipy zygote, the namespace's init; the host's pids mean nothing.
    who = ("import sys\nos = sys.modules['os']\n{extra}"
           "def transform(g):\n    return [[min(os.getppid(), 9)]]\n")
    plain, scipy = who.format(extra=""), who.format(extra="import scipy.ndimage\n")
    results = executor.execute_many(TASK, [plain, scipy])
    if not ROOT:
        pytest.skip("PID namespaces need root")
    assert results[0].train[0].output == ((0,),)
    assert results[1].train[0].output == ((1,),)


# A program that searches the memory it inherited from the worker for a string, page by
# page (rt_sigprocmask with an invalid 'how' is the probe: EFAULT unless the page is
# readable). It holds the string shifted by one byte, so it never finds its own copy.
READER = CTYPES + """gc = sys.modules['gc']
libc.syscall.restype = ctypes.c_long
NEEDLE = {shifted!r}
SHIFT = bytes((i + 1) % 256 for i in range(256))
def readable(addr):
    ctypes.set_errno(0)
    libc.syscall(14, 99, ctypes.c_void_p(addr), None, 8)
    return ctypes.get_errno() != 14
def transform(g):
    regions = sorted({{id(o) >> 20 for o in gc.get_objects()}})
    spans, lo, hi = [], regions[0], regions[0]
    for r in regions[1:]:
        if r - hi > 64:
            spans.append((lo, hi))
            lo = r
        hi = r
    spans.append((lo, hi))
    for lo, hi in spans:
        for page in range((lo - 1) << 8, (hi + 2) << 8):
            addr = page << 12
            if readable(addr) and readable(addr + 4088):
                if NEEDLE in ctypes.string_at(addr, 4096).translate(SHIFT):
                    return [[1]]
    return [[0]]
"""


def test_a_program_cannot_find_an_earlier_programs_code_in_its_memory():
    secret = f"PROGRAM-SECRET-{os.urandom(8).hex()}"
    # a long program, as models write with their reasoning in comments
    earlier = f"# {'x' * 20000}\n# {secret}\n# {'y' * 20000}\n{FLIP}"
    reader = READER.format(shifted=bytes((b + 1) % 256 for b in secret.encode()))
    limits = SandboxLimits(setup_cpu_s=10.0)
    worker = SandboxWorker()
    try:
        [first] = decode_run(worker.run("k", [[[1, 2]]], limits, earlier), 1)
        assert first.output == ((2, 1),)
        [found] = decode_run(worker.run("k", [[[1, 2]]], limits, reader), 1)
    finally:
        worker.close()
    assert found.status == "ok", found
    assert found.output == ((0,),)
