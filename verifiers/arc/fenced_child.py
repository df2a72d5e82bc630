"""The program side of the sandbox: what a forked child runs, from fencing to _exit.

Stdlib + numpy only (imported by zygote.py, which runs as a script beside it). The worker
calls ``configure`` once, before any fork; each child then fences itself (``setup``) before
its program exists, reads its job (the task's inputs and the code) from CODE_FD, runs it and
writes one line per input to RESULT_FD. Every failure becomes a line or an exit code. The
lines are untrusted: the verifier decodes them strictly (sandbox.decode_run).
"""

from __future__ import annotations

import builtins
import fcntl
import os
import random

import fence
from encode import ForbiddenImport, encode_output, failure

RESULT_FD = 3
CODE_FD = 4  # until the child has read its job
MAX_FDS = 8
EXIT_SETUP_FAILED = 71


def configure(*, seccomp: fence.SeccompFilter, empty_root: str, uid: int, devnull: int,
              allowed_exact: frozenset[str], allowed_prefixes: tuple[str, ...]) -> None:
    """What every child fences itself with; set in the worker before the first fork."""
    global _SECCOMP, _EMPTY_ROOT, _UID, _DEVNULL, _ALLOWED_EXACT, _ALLOWED_PREFIXES
    _SECCOMP, _EMPTY_ROOT, _UID, _DEVNULL = seccomp, empty_root, uid, devnull
    _ALLOWED_EXACT, _ALLOWED_PREFIXES = allowed_exact, allowed_prefixes


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


def setup(code_r: int, result_w: int, devnull: int, rlimits: tuple[int, int]) -> None:
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


def run(code_r: int, result_w: int, rlimits: tuple[int, int]) -> None:
    """Never returns. Every failure becomes a line or an exit code, never an exception.

    The child fences itself before its program exists (see fork_runner.Warm), then reads the
    inputs and the code from its pipe."""
    try:
        setup(code_r, result_w, _DEVNULL, rlimits)
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


_SECCOMP: fence.SeccompFilter
_EMPTY_ROOT = ""
_UID = -1
_DEVNULL = -1
_ALLOWED_EXACT: frozenset[str] = frozenset()
_ALLOWED_PREFIXES: tuple[str, ...] = ()
_real_import = builtins.__import__
