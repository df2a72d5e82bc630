"""The sandbox worker: a warm fork server that runs each program in a fresh, fenced child.

Runs as its own interpreter (``python zygote.py``, started by sandbox.SandboxWorker with a
clean environment), never as part of the verifier: the verifier's memory holds expected
outputs, Redis clients and other programs' results, and a forked child could read all of
it. This process holds only what a program may see (the task's input grids and the code).
It imports numpy, a curated set of computation-only stdlib modules and the caller's
allowed modules once, then for every program:

    fork (ahead of the program: the child waits fenced, see fork_runner.Warm)
         -> child (fenced_child.py): stdio to /dev/null, result pipe on fd 3, job pipe on fd 4, all other fds
            closed, rlimits, chroot into an empty dir, drop to the worker's own uid (if
            root), import guard, seccomp (see fence.py), seeded RNG; then it reads its job
            (the task's inputs and the code) from fd 4 and closes it,
            exec the code, call transform() on a fresh copy of each input, write one line
            per input to fd 3, _exit
         -> here (fork_runner.py): write the job, wipe the code, fork the next program's child, watch this
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

import gc
import importlib
import json
import os
import struct
import sys

import fence  # sibling modules: this file runs as a script, its directory is sys.path[0]
import fenced_child
import fork_runner
import wire

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


def _rss_kb() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


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


def serve(proto_in: int, proto_out: int, sub: _Sub | None) -> None:
    """Answer requests until EOF: task (inputs and limits), a program (b"R" + source), ping."""
    grids = b""
    budgets: list[float] = []
    limits: dict = {}
    task: dict = {}
    while True:
        n = wire.read_request(proto_in)
        if n is None:
            fork_runner.discard_warm()
            fork_runner.reap(block=True)
            if sub is not None:
                sub.close()
            return
        if n and wire.INBUF[0] == ord("R"):  # a program: b"R" + its UTF-8 source
            if sub is not None and wire.INBUF.find(b"scipy", 1, n) >= 0:
                reply, size = sub.run(n, task)
            else:
                reply, size = fork_runner.run_program(n, grids, budgets, limits)
            wire.write_frame(proto_out, reply)
            with memoryview(wire.OUTBUF) as view:
                wire.write_all(proto_out, view[:reply["out_len"]])
            wire.wipe(wire.OUTBUF, size)
            continue
        req = json.loads(bytes(wire.INBUF[:n]))
        if req["op"] == "task":
            task = req
            grids = fork_runner.encode_grids(req["inputs"])
            budgets = [float(b) for b in req["budgets"]]
            # the warm heap's size, measured here once per task rather than in each child
            limits = dict(req["limits"], vm_base_bytes=fork_runner.vm_bytes())
            if len(wire.OUTBUF) != limits["max_result_bytes"] + wire.READ_CHUNK:
                wire.OUTBUF.close()
                wire.OUTBUF = wire.buffer(limits["max_result_bytes"] + wire.READ_CHUNK, inherit=False)
            if sub is not None:
                sub.task_sent = False
            wire.write_frame(proto_out, {"ok": True})
        elif req["op"] == "ping":  # health and leak check: our own fds and memory
            fork_runner.discard_warm()  # no child of ours outlives a ping
            fork_runner.reap(block=True)
            reply = {"ok": True, "fds": len(os.listdir("/proc/self/fd")), "rss_kb": _rss_kb()}
            if sub is not None:
                reply["scipy_zygote"] = dict(sub.ask(req), pid=sub.pid)
            wire.write_frame(proto_out, reply)
        else:
            wire.write_frame(proto_out, {"error": f"unknown op {req['op']!r}"})


def main() -> None:
    global _PROTO_IN, _PROTO_OUT
    _PROTO_IN, _PROTO_OUT = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)  # a stray print() in an imported module must not corrupt frames
    # No PR_SET_PDEATHSIG here: it fires when the *thread* that started us exits, and the
    # verifier starts workers from short-lived threads. EOF on stdin ends us instead.
    config = wire.read_frame(_PROTO_IN)
    if config is None:
        return
    allowed = list(config.get("allowed_modules", []))
    errors = _preload(list(STDLIB_ALLOWED) + list(NUMPY_PRELOAD) + allowed)
    sys.path[:] = [p for p in sys.path if p != os.path.dirname(os.path.abspath(__file__))]
    empty_root = os.path.abspath("empty-root")  # cwd is the worker's private scratch dir
    os.mkdir(empty_root, 0o555)
    uid = fence.worker_uid(os.getpid())
    fenced_child.configure(seccomp=fence.SeccompFilter(), empty_root=empty_root, uid=uid,
                    devnull=devnull, allowed_exact=frozenset(STDLIB_ALLOWED) | frozenset(allowed),
                    allowed_prefixes=tuple(n for n in STDLIB_ALLOWED + tuple(allowed) if n != "sys"))
    netns = fence.unshare_network() if os.geteuid() == 0 else False
    gc.collect()
    gc.freeze()  # children then leave the warm heap's pages shared (no gc writes to them)
    # Programs live in a PID namespace of this worker's (root only); its init is the scipy
    # zygote, forked first, which lives as long as we do.
    pidns = fence.unshare_pids() if os.geteuid() == 0 else False
    sub = _Sub()
    errors.update(sub.ready())
    wire.write_frame(_PROTO_OUT, {"ready": True, "pid": os.getpid(), "errors": errors,
                             "netns": netns, "root": os.geteuid() == 0, "uid": uid,
                             "scipy_zygote": sub.pid, "pidns": pidns})
    serve(_PROTO_IN, _PROTO_OUT, sub)


_PROTO_IN = _PROTO_OUT = -1

if __name__ == "__main__":
    main()
