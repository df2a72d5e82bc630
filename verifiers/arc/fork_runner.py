"""The trusted side of one program: its child, forked ahead; the hand-off; the watch.

Stdlib only (imported by zygote.py, which runs as a script beside it). Each program runs
in a fresh child forked from the worker (fenced_child.py). The child for the next program is
forked while a program runs (``Warm``), fences itself and waits for its job, so that fork
and fencing leave the critical path; the worker then watches the child's CPU clock and
wall clock against the program's cumulative budget, reads at most max_result_bytes of its
output into wire.OUTBUF and kills it through a pidfd.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import time
from typing import NamedTuple

import fenced_child
import wire


def vm_bytes() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _cpu_seconds(pid: int, last: float) -> float:
    try:  # the CPU-time clock of another process: ((~pid) << 3) | CPUCLOCK_SCHED
        return time.clock_gettime((~pid << 3) | 2)
    except OSError:  # already exited
        return last


class Warm(NamedTuple):
    """A child forked before its program: it fences itself, then waits for its job (the
    task's inputs and the program's code) on a pipe, so that fork and fencing overlap the
    previous program's run instead of preceding each program. Still one fresh child per
    program: a warm child is given one program, and it holds nothing of any other. It
    serves any task whose rlimits (address space, CPU backstop) it was fenced with."""
    pid: int
    pidfd: int
    job_w: int
    result_r: int
    rlimits: tuple[int, int]


def _rlimits(limits: dict) -> tuple[int, int]:
    return limits["vm_base_bytes"] + limits["memory_bytes"], limits["cpu_backstop_s"]


def _spawn(rlimits: tuple[int, int]) -> Warm:
    """Fork a child. It does not map wire.INBUF or wire.OUTBUF (wire.buffer), so whenever it
    is forked it holds no program's code or output but, later, its own job's."""
    job_r, job_w = os.pipe()
    r, w = os.pipe()
    pid = _fork()
    if pid == 0:
        fenced_child.run(job_r, w, rlimits)
    os.close(job_r)
    os.close(w)
    return Warm(pid, os.pidfd_open(pid), job_w, r, rlimits)


def _drop(warm: Warm) -> None:
    """Kill it (a no-op if it died already) and leave it to ``reap``."""
    signal.pidfd_send_signal(warm.pidfd, signal.SIGKILL)
    os.close(warm.job_w)
    os.close(warm.result_r)
    _UNREAPED.append((warm.pid, warm.pidfd))


def discard_warm() -> None:
    """Kill the waiting child (reaped with the others): no child outlives a ping or EOF."""
    global _WARM
    if _WARM is not None:
        _drop(_WARM)
        _WARM = None


def _take_warm(rlimits: tuple[int, int]) -> Warm:
    """The waiting child, or a new one where none waits, it was fenced with other rlimits
    (another task), or it died waiting (killed from outside: not this program's doing).
    A child whose fencing fails fails again here, and its exit status says so."""
    global _WARM
    warm, _WARM = _WARM, None
    if warm is not None and (warm.rlimits != rlimits
                             or select.select([warm.pidfd], [], [], 0)[0]):
        _drop(warm)
        warm = None
    return warm if warm is not None else _spawn(rlimits)


def _handoff(child: Warm, grids: bytes, code_len: int) -> None:
    """Write the job (4-byte length, the grids, the code from wire.INBUF) and close the pipe."""
    try:
        wire.write_all(child.job_w, memoryview(len(grids).to_bytes(4, "big") + grids))
        with memoryview(wire.INBUF) as view:  # b"R" + code
            wire.write_all(child.job_w, view[1:code_len])
    except BrokenPipeError:  # it died before reading: its exit status says why
        pass
    os.close(child.job_w)


def run_program(code_len: int, grids: bytes, budgets: list[float], limits: dict
                ) -> tuple[dict, int]:
    """Run the code in wire.INBUF on the task's input ``grids`` (encode_grids) in a fresh
    child, enforce the budgets; returns its fate and the length of its output, which is in
    wire.OUTBUF (the caller sends it on and wipes it). Forks the next program's child while
    this one runs."""
    global _WARM
    # cumulative CPU allowance once k inputs are done: setup + budgets[0..k]
    allow = [limits["setup_cpu_s"]]
    for b in budgets:
        allow.append(allow[-1] + b)
    reap(block=False)
    rlimits = _rlimits(limits)
    child = _take_warm(rlimits)
    pid, pidfd, r = child.pid, child.pidfd, child.result_r
    start = time.monotonic()
    cpu0 = _cpu_seconds(pid, 0.0)  # its fencing (so far) is not the program's time
    _handoff(child, grids, code_len)
    wire.wipe(wire.INBUF, code_len)
    _WARM = _spawn(rlimits)  # the next program's child, after the wipe
    poller = select.poll()
    poller.register(r, select.POLLIN)
    poller.register(pidfd, select.POLLIN)
    out = memoryview(wire.OUTBUF)
    size = 0
    lines, cpu, term, reading, timeout_kind = 0, 0.0, "exit", True, None
    cap = limits["max_result_bytes"]
    while True:
        k = min(lines, len(budgets)) + 1 if budgets else 0
        cpu_allow = allow[min(k, len(allow) - 1)]
        wall_allow = cpu_allow * limits["wall_factor"] + limits["wall_slack_s"]
        cpu = _cpu_seconds(pid, cpu0 + cpu) - cpu0
        wall = time.monotonic() - start
        if cpu >= cpu_allow or wall >= wall_allow:
            term = "timeout"
            timeout_kind = "cpu" if cpu >= cpu_allow else "wall"
            break
        wait_ms = max(1, int(1000 * min(cpu_allow - cpu, wall_allow - wall)) + 1)
        exited = False
        for fd, _ in poller.poll(wait_ms):
            if fd == pidfd:
                exited = True
            elif reading:
                k = os.readv(r, [out[size:size + wire.READ_CHUNK]])
                if not k:
                    reading = False
                    poller.unregister(r)
                lines += _count_lines(size, size + k, len(budgets) - lines)
                size += k
        if size > cap:
            term = "overflow"
            break
        if lines >= len(budgets) and not exited:
            term = "done"  # every input answered: the rest is exit teardown (or mischief)
            break
        if exited:
            while reading and size <= cap:  # the only writer is gone: read to EOF
                k = os.readv(r, [out[size:size + wire.READ_CHUNK]])
                reading = k > 0
                size += k
            if size > cap:
                term = "overflow"
            break
    exit_code = None
    if term == "exit":
        exit_code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        os.close(pidfd)
    else:  # killed now, reaped before the next fork: its teardown overlaps our reply
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        _UNREAPED.append((pid, pidfd))
    os.close(r)
    out.release()
    return {
        "term": "exit" if term == "done" else term,
        "timeout_kind": timeout_kind,
        "exit_code": exit_code,
        "out_len": min(size, cap),  # that many bytes follow the reply frame
        "cpu_s": round(cpu, 6),
        "wall_s": round(time.monotonic() - start, 6),
    }, size


def _fork() -> int:
    """fork(2) without CPython's after-fork work in the child (thread-state and lock
    re-initialisation, at-fork hooks: 0.7 ms and ~180 page copies per child), which this
    single-threaded process does not need: the child only fences itself and runs one
    program. ctypes drops the GIL around the call, so the child finds it free."""
    pid = _LIBC.fork()
    if pid < 0:
        raise OSError(ctypes.get_errno(), "fork failed")
    return pid


def _count_lines(start: int, end: int, most: int) -> int:
    """Newlines in wire.OUTBUF[start:end], counting at most ``most`` (no copy of the data)."""
    n = 0
    while n < most:
        start = wire.OUTBUF.find(b"\n", start, end) + 1
        if not start:
            break
        n += 1
    return n


def reap(block: bool) -> None:
    """Collect killed children; non-blocking between programs, so that a child's exit
    teardown overlaps the next fork, blocking (all of them) on ping and at the end."""
    for pid, pidfd in list(_UNREAPED):
        if os.waitpid(pid, 0 if block else os.WNOHANG)[0] == pid:
            os.close(pidfd)
            _UNREAPED.remove((pid, pidfd))


def encode_grids(grids: list) -> bytes:
    """A task's input grids (lists of digit strings) as the child reads them: rows joined
    by ',', grids by ';'. Raises ValueError on anything but digits."""
    rows = [row for g in grids for row in g]
    if not all(type(row) is str and row.isascii() and row.isdigit() for row in rows):
        raise ValueError("input grids: rows must be strings of digits")
    return b";".join(b",".join(row.encode() for row in g) for g in grids)


_UNREAPED: list[tuple[int, int]] = []
_WARM: Warm | None = None
_LIBC = ctypes.CDLL(None, use_errno=True)
