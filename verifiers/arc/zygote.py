"""The sandbox worker: a warm fork server that runs each program in a fresh, fenced child.

Runs as its own interpreter (``python zygote.py``, started by sandbox.SandboxWorker with a
clean environment), never as part of the verifier: the verifier's memory holds expected
outputs, Redis clients and other programs' results, and a forked child could read all of
it. This process holds only what a program may see (the task's input grids and the code).
It imports numpy, a curated set of computation-only stdlib modules and the caller's
allowed modules once, then for every program:

    fork (ahead of the program: the child waits fenced, see _Warm)
         -> child: stdio to /dev/null, result pipe on fd 3, job pipe on fd 4, all other fds
            closed, rlimits, chroot into an empty dir, drop to the worker's own uid (if
            root), import guard, seccomp (see fence.py), seeded RNG; then it reads its job
            (the task's inputs and the code) from fd 4 and closes it,
            exec the code, call transform() on a fresh copy of each input, write one line
            per input to fd 3, _exit
         -> here: write the job, wipe the code, fork the next program's child, watch this
            child's CPU clock (from the hand-off) and wall clock against a cumulative
            per-input budget, read at most max_result_bytes, SIGKILL through a pidfd,
            reap, reply

Because every program gets its own copy-on-write child of a process that never runs
program code, nothing a program does (monkeypatching numpy or builtins, leaking memory,
closing fds) can reach a later program; and because code and outputs pass through this
process only in buffers wiped after use and not mapped in children (wire.py), no child
finds an earlier program's code or results in the memory it inherits. Programs that name
scipy run in a second zygote (``_Sub``), forked from this one before any program, that
also holds scipy.ndimage.
The child's lines are untrusted: the parent decodes them strictly (sandbox.decode_run).
Protocol with the parent: wire.py, on the fds that were stdin/stdout at start.
"""

from __future__ import annotations

import builtins
import ctypes
import fcntl
import gc
import importlib
import json
import os
import random
import select
import signal
import struct
import sys
import time
from typing import NamedTuple

import fence  # sibling modules: this file runs as a script, its directory is sys.path[0]
import wire
from encode import ForbiddenImport, encode_output, failure

# Computation-only standard library modules a program may import (all preloaded, because
# the child cannot open files). sys is here because flood-fill code raises the recursion
# limit with it; it exposes nothing the kernel fences do not already cover.
STDLIB_ALLOWED = (
    "__future__", "abc", "array", "bisect", "cmath", "collections", "collections.abc",
    "contextlib", "copy", "dataclasses", "decimal", "enum", "fractions", "functools",
    "heapq", "itertools", "json", "math", "numbers", "operator", "queue", "random", "re",
    "statistics", "string", "sys", "textwrap", "time", "types", "typing", "warnings",
)
# numpy with every submodule its public functions import lazily (np.percentile and
# np.kron reach numpy.ma, np.polynomial is an attribute that imports on first use): the
# child cannot open files, so what is not loaded here fails with ModuleNotFoundError.
# Not numpy.random: nondeterministic, and 7 MB more warm heap that every fork pays for.
NUMPY_PRELOAD = ("numpy", "numpy.linalg", "numpy.fft", "numpy.lib.stride_tricks", "numpy.ma",
                 "numpy.polynomial", "numpy.char", "numpy.strings", "numpy.rec",
                 "numpy.exceptions", "numpy.dtypes")
# scipy.ndimage (label, binary_fill_holes, find_objects, ...) is common in ARC programs;
# the rest of scipy is not allowed (scipy itself only as the package that holds it).
SCIPY_PRELOAD = ("scipy", "scipy.ndimage")
RESULT_FD = 3
CODE_FD = 4  # until the child has read its program
MAX_FDS = 8
EXIT_SETUP_FAILED = 71


# ---------------------------------------------------------------- the child (program side)

def _guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
    if level != 0 or not _import_allowed(name):
        raise ForbiddenImport(f"import of {name!r} is not allowed in ARC programs")
    return _real_import(name, globals, locals, fromlist, level)


def _import_allowed(name: str) -> bool:
    if name in _ALLOWED_EXACT or name.split(".", 1)[0] == "numpy":
        return True
    if name == "scipy" or name == "scipy.ndimage" or name.startswith("scipy.ndimage."):
        return True
    return any(name.startswith(m + ".") for m in _ALLOWED_PREFIXES)


def _child_setup(code_r: int, result_w: int, devnull: int, rlimits: tuple[int, int]) -> None:
    # the pipes may sit on fds 0..4 (the scipy zygote's low fds are free): move them first
    code_r, result_w = (fcntl.fcntl(fd, fcntl.F_DUPFD, CODE_FD + 1) for fd in (code_r, result_w))
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.dup2(result_w, RESULT_FD)
    os.dup2(code_r, CODE_FD)
    os.closerange(CODE_FD + 1, 1 << 20)
    fence.set_limits(address_space_bytes=rlimits[0], cpu_seconds=rlimits[1], max_fds=MAX_FDS)
    fence.enter_empty_root(_EMPTY_ROOT)
    fence.drop_privileges(_UID)
    fence.die_with_parent()  # after the uid change, which clears the parent-death signal
    random.seed(0)  # the same state for every program, whatever ran here before
    builtins.__import__ = _guarded_import
    _SECCOMP.load()


def _read_job() -> tuple[list, str]:
    """The task's inputs and the program's source from CODE_FD, to EOF (the worker closes
    its end once written: see ``_handoff``); the fd is closed after, so the program sees
    the fds children always had."""
    chunks = []
    while chunk := os.read(CODE_FD, 1 << 16):
        chunks.append(chunk)
    os.close(CODE_FD)
    data = b"".join(chunks)
    n = int.from_bytes(data[:4], "big")
    grids = data[4:4 + n]
    inputs = [[list(row.translate(_DIGIT_VALUES)) for row in g.split(b",")]
              for g in grids.split(b";")] if grids else []
    return inputs, data[4 + n:].decode("utf-8", "surrogatepass")


_DIGIT_VALUES = bytes.maketrans(b"0123456789", bytes(range(10)))


def _child(code_r: int, result_w: int, devnull: int, rlimits: tuple[int, int]) -> None:
    """Never returns. Every failure becomes a line or an exit code, never an exception.

    The child fences itself before its program exists (see ``_Warm``), then reads the
    inputs and the code from its pipe."""
    try:
        _child_setup(code_r, result_w, devnull, rlimits)
        inputs, code = _read_job()
    except BaseException:
        os._exit(EXIT_SETUP_FAILED)
    write = os.write
    try:
        namespace = {"__name__": "arc_program", "__builtins__": builtins}
        exec(compile(code, "<program>", "exec"), namespace)
        transform = namespace.get("transform")
        if not callable(transform):
            raise NameError("the program defines no callable transform(grid)")
    except BaseException as e:
        line = failure(e).encode()
        for _ in inputs:
            write(RESULT_FD, line)
        os._exit(0)
    for grid in inputs:
        try:
            line = encode_output(transform([list(row) for row in grid]))
        except BaseException as e:
            line = failure(e)
        write(RESULT_FD, line.encode())
    os._exit(0)


# ---------------------------------------------------------------- the server (trusted side)

def _vm_bytes() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _cpu_seconds(pid: int, last: float) -> float:
    try:  # the CPU-time clock of another process: ((~pid) << 3) | CPUCLOCK_SCHED
        return time.clock_gettime((~pid << 3) | 2)
    except OSError:  # already exited
        return last


class _Warm(NamedTuple):
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


def _spawn(rlimits: tuple[int, int]) -> _Warm:
    """Fork a child. Called only while wire.INBUF and wire.OUTBUF hold no program's code or
    output (and children do not even map them: wire.buffer)."""
    job_r, job_w = os.pipe()
    r, w = os.pipe()
    pid = _fork()
    if pid == 0:
        _child(job_r, w, _DEVNULL, rlimits)
    os.close(job_r)
    os.close(w)
    return _Warm(pid, os.pidfd_open(pid), job_w, r, rlimits)


def _drop(warm: _Warm, *, kill: bool) -> None:
    if kill:
        signal.pidfd_send_signal(warm.pidfd, signal.SIGKILL)
    os.close(warm.job_w)
    os.close(warm.result_r)
    _UNREAPED.append((warm.pid, warm.pidfd))


def discard_warm() -> None:
    """Kill the waiting child (reaped with the others): no child outlives a ping or EOF."""
    global _WARM
    if _WARM is not None:
        _drop(_WARM, kill=True)
        _WARM = None


def _take_warm(rlimits: tuple[int, int]) -> _Warm:
    """The waiting child, or a new one where none waits, it was fenced with other rlimits
    (another task), or it died waiting (killed from outside: not this program's doing).
    A child whose fencing fails fails again here, and its exit status says so."""
    global _WARM
    warm, _WARM = _WARM, None
    if warm is not None and (warm.rlimits != rlimits
                             or select.select([warm.pidfd], [], [], 0)[0]):
        _drop(warm, kill=True)
        warm = None
    return warm if warm is not None else _spawn(rlimits)


def _handoff(child: _Warm, grids: bytes, code_len: int) -> None:
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
    _reap(block=False)
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


def _rss_kb() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def _reap(block: bool) -> None:
    """Collect killed children; non-blocking between programs, so that a child's exit
    teardown overlaps the next fork, blocking (all of them) on ping and at the end."""
    for pid, pidfd in list(_UNREAPED):
        if os.waitpid(pid, 0 if block else os.WNOHANG)[0] == pid:
            os.close(pidfd)
            _UNREAPED.remove((pid, pidfd))


def _preload(names: list[str]) -> dict[str, str]:
    """Import modules now (the child cannot read files); name -> error for failures."""
    errors = {}
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as e:
            errors[name] = f"{type(e).__name__}: {e}"
    return errors


class _Sub:
    """The scipy zygote: forked from this one before any program, it also holds scipy.ndimage
    (27 MB more warm heap, which every fork and exit would pay for), and runs the programs
    that mention scipy; this process relays their requests and replies."""

    unmapped: tuple = ()  # in the scipy zygote: the worker's buffers, inherited unmapped

    def __init__(self) -> None:
        req_r, self.req_w = os.pipe()
        self.rep_r, rep_w = os.pipe()
        self.task_sent = False
        self.pid = os.fork()  # once, and it lives on: CPython's after-fork work is wanted
        if self.pid == 0:
            try:
                for fd in (_PROTO_IN, _PROTO_OUT, self.req_w, self.rep_r):
                    os.close(fd)
                # ours: the worker's two buffers are not mapped in its children. Their
                # objects are kept, never freed: freeing one would munmap its address
                # range, which a new mapping here may occupy.
                _Sub.unmapped = (wire.INBUF, wire.OUTBUF)
                wire.INBUF = wire.buffer(1 << 20, inherit=False)
                wire.OUTBUF = wire.buffer(wire.READ_CHUNK, inherit=False)
                fence.die_with_parent()
                errors = _preload(list(SCIPY_PRELOAD))
                gc.collect()
                gc.freeze()
                wire.write_frame(rep_w, {"ready": True, "errors": errors})
                serve(req_r, rep_w, None)
            finally:
                os._exit(0)
        os.close(req_r)
        os.close(rep_w)

    def ready(self) -> dict[str, str]:
        """Wait until scipy is loaded (the worker's start-up allowance covers it, a
        program's reply time would not); returns its import errors."""
        return self._reply()["errors"]

    def ask(self, obj: dict) -> dict:
        wire.write_frame(self.req_w, obj)
        return self._reply()

    def run(self, n: int, task: dict) -> tuple[dict, int]:
        """Relay the program in wire.INBUF[:n]; its output lands in wire.OUTBUF."""
        if not self.task_sent:
            self.ask(task)
            self.task_sent = True
        with memoryview(wire.INBUF) as view:
            wire.write_all(self.req_w, memoryview(struct.pack(">I", n)))
            wire.write_all(self.req_w, view[:n])
        wire.wipe(wire.INBUF, n)
        reply = self._reply()
        size = reply["out_len"]
        with memoryview(wire.OUTBUF) as view:
            pos = 0
            while pos < size:
                k = os.readv(self.rep_r, [view[pos:size]])
                if not k:
                    raise EOFError("the scipy zygote exited")
                pos += k
        return reply, size

    def _reply(self) -> dict:
        reply = wire.read_frame(self.rep_r)
        if reply is None:
            raise EOFError("the scipy zygote exited")
        return reply

    def close(self) -> None:
        os.close(self.req_w)
        os.waitpid(self.pid, 0)
        os.close(self.rep_r)


def encode_grids(grids: list) -> bytes:
    """A task's input grids (lists of digit strings) as the child reads them: rows joined
    by ',', grids by ';'. Raises ValueError on anything but digits."""
    rows = [row for g in grids for row in g]
    if not all(type(row) is str and row.isascii() and row.isdigit() for row in rows):
        raise ValueError("input grids: rows must be strings of digits")
    return b";".join(b",".join(row.encode() for row in g) for g in grids)


def serve(proto_in: int, proto_out: int, sub: _Sub | None) -> None:
    """Answer requests until EOF: task (inputs and limits), a program (b"R" + source), ping."""
    grids = b""
    budgets: list[float] = []
    limits: dict = {}
    task: dict = {}
    while True:
        n = wire.read_request(proto_in)
        if n is None:
            discard_warm()
            _reap(block=True)
            if sub is not None:
                sub.close()
            return
        if n and wire.INBUF[0] == ord("R"):  # a program: b"R" + its UTF-8 source
            if sub is not None and wire.INBUF.find(b"scipy", 1, n) >= 0:
                reply, size = sub.run(n, task)
            else:
                reply, size = run_program(n, grids, budgets, limits)
            wire.write_frame(proto_out, reply)
            with memoryview(wire.OUTBUF) as view:
                wire.write_all(proto_out, view[:reply["out_len"]])
            wire.wipe(wire.OUTBUF, size)
            continue
        req = json.loads(bytes(wire.INBUF[:n]))
        if req["op"] == "task":
            task = req
            grids = encode_grids(req["inputs"])
            budgets = [float(b) for b in req["budgets"]]
            # the warm heap's size, measured here once per task rather than in each child
            limits = dict(req["limits"], vm_base_bytes=_vm_bytes())
            if len(wire.OUTBUF) != limits["max_result_bytes"] + wire.READ_CHUNK:
                wire.OUTBUF.close()
                wire.OUTBUF = wire.buffer(limits["max_result_bytes"] + wire.READ_CHUNK, inherit=False)
            if sub is not None:
                sub.task_sent = False
            wire.write_frame(proto_out, {"ok": True})
        elif req["op"] == "ping":  # health and leak check: our own fds and memory
            discard_warm()  # no child of ours outlives a ping
            _reap(block=True)
            reply = {"ok": True, "fds": len(os.listdir("/proc/self/fd")), "rss_kb": _rss_kb()}
            if sub is not None:
                reply["scipy_zygote"] = dict(sub.ask(req), pid=sub.pid)
            wire.write_frame(proto_out, reply)
        else:
            wire.write_frame(proto_out, {"error": f"unknown op {req['op']!r}"})


def main() -> None:
    global _DEVNULL, _SECCOMP, _ALLOWED_EXACT, _ALLOWED_PREFIXES, _EMPTY_ROOT, _UID
    global _PROTO_IN, _PROTO_OUT
    _PROTO_IN, _PROTO_OUT = os.dup(0), os.dup(1)
    _DEVNULL = os.open(os.devnull, os.O_RDWR)
    os.dup2(_DEVNULL, 0)
    os.dup2(_DEVNULL, 1)  # a stray print() in an imported module must not corrupt frames
    # No PR_SET_PDEATHSIG here: it fires when the *thread* that started us exits, and the
    # verifier starts workers from short-lived threads. EOF on stdin ends us instead.
    config = wire.read_frame(_PROTO_IN)
    if config is None:
        return
    allowed = list(config.get("allowed_modules", []))
    errors = _preload(list(STDLIB_ALLOWED) + list(NUMPY_PRELOAD) + allowed)
    sys.path[:] = [p for p in sys.path if p != os.path.dirname(os.path.abspath(__file__))]
    _ALLOWED_EXACT = frozenset(STDLIB_ALLOWED) | frozenset(allowed)
    _ALLOWED_PREFIXES = tuple(n for n in STDLIB_ALLOWED + tuple(allowed) if n != "sys")
    _SECCOMP = fence.SeccompFilter()
    _EMPTY_ROOT = os.path.abspath("empty-root")  # cwd is the worker's private scratch dir
    os.mkdir(_EMPTY_ROOT, 0o555)
    _UID = fence.worker_uid(os.getpid())
    netns = fence.unshare_network() if os.geteuid() == 0 else False
    gc.collect()
    gc.freeze()  # children then leave the warm heap's pages shared (no gc writes to them)
    # Programs live in a PID namespace of this worker's (root only); its init is the scipy
    # zygote, forked first, which lives as long as we do.
    pidns = fence.unshare_pids() if os.geteuid() == 0 else False
    sub = _Sub()
    errors.update(sub.ready())
    wire.write_frame(_PROTO_OUT, {"ready": True, "pid": os.getpid(), "errors": errors,
                             "netns": netns, "root": os.geteuid() == 0, "uid": _UID,
                             "scipy_zygote": sub.pid, "pidns": pidns})
    serve(_PROTO_IN, _PROTO_OUT, sub)


_DEVNULL = -1
_PROTO_IN = _PROTO_OUT = -1
_UNREAPED: list[tuple[int, int]] = []
_WARM: _Warm | None = None
_SECCOMP: fence.SeccompFilter
_EMPTY_ROOT = ""
_UID = -1
_ALLOWED_EXACT: frozenset[str] = frozenset()
_ALLOWED_PREFIXES: tuple[str, ...] = ()
_real_import = builtins.__import__
_LIBC = ctypes.CDLL(None, use_errno=True)

if __name__ == "__main__":
    main()
