"""Kernel-level fences for one sandboxed program process (stdlib only: runs in the worker).

The Python-level import guard in the worker is a courtesy that gives clear "forbidden"
statuses; these fences are the security boundary, because a hostile program can reach any
object in its own interpreter (``sys.modules['os']``, ctypes, ``__subclasses__`` tricks):

- seccomp, default deny (EPERM): only the system calls a running CPython + numpy needs to
  compute are allowed. Denied, among others: open/openat (no file reads or writes at all),
  socket (no network), fork/clone/execve (no processes, no threads), kill/tkill/tgkill
  (cannot signal the worker, the verifier or other programs), ptrace/process_vm_*, setrlimit
  (cannot raise its limits), mount/unshare/setns. Calls that are allowed are allowed only
  with arguments that are safe whatever the program passes: fcntl only for commands that
  cannot make the kernel send signals (no F_SETOWN/F_SETSIG, no O_ASYNC), prlimit64 only
  to read its own limits, clocks only the fixed ones. Applied with no_new_privs, irreversibly.
- resource limits: address space (memory), CPU seconds (a backstop for the worker's
  precise CPU/wall watchdog), file size 0, a handful of fds, no core dumps, no processes.
- an empty root: the child chroots into an empty directory before seccomp, because one
  allowed call still takes a path (newfstatat with AT_EMPTY_PATH and a non-empty path is
  resolved by the kernel: it leaked the size of /etc/shadow). Nothing is there to see. As
  root this is a plain chroot; otherwise a new user namespace grants the right to chroot;
  where neither works the child runs without it (``enter_empty_root`` says so).
- when running as root: drop to a uid/gid of the worker's own (``worker_uid``: a high uid
  no account uses, different for every live worker on the machine) with no groups, so the
  process owns nothing, cannot raise a hard limit and cannot touch root's processes or
  another worker's programs even if a fence had a hole; the worker process lives in its
  own network namespace (down loopback), and its programs in a PID namespace of their own
  (they see no process outside it: a pid they are given or guess names nothing there).

libseccomp is used through ctypes (Debian's libseccomp2, present wherever Ray runs) with
its non-variadic ``seccomp_rule_add_array`` so no C varargs cross ctypes; it resolves
syscall names per architecture, so the allowlist is written once, by name.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import resource

UID_BASE = 0x70000000  # worker uids: UID_BASE + the worker's pid (pid_max <= 2**22)
CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
PR_SET_PDEATHSIG = 1
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2

_ACT_ALLOW = 0x7FFF0000
_ACT_ERRNO_EPERM = 0x00050000 | errno.EPERM
_CMP_LT = 2
_CMP_EQ = 4
_CMP_MASKED_EQ = 7
_AT_EMPTY_PATH = 0x1000
_O_ASYNC = 0o20000
# fcntl commands CPython and numpy use on open fds. Denied above all: F_SETOWN(_EX) and
# F_SETSIG, which with O_ASYNC make the kernel signal a chosen pid whenever the worker
# reads the result pipe; F_SETLEASE/F_NOTIFY/F_SETLK*, which also deliver signals.
FCNTL_ALLOWED = {"F_DUPFD": 0, "F_GETFD": 1, "F_SETFD": 2, "F_GETFL": 3,
                 "F_DUPFD_CLOEXEC": 1030}
F_SETFL = 4
# Clocks a program may read or sleep on: the fixed ones (0..15: realtime, monotonic, its
# own process and thread CPU clocks, ...), not another process's CPU clock (negative ids).
MAX_CLOCK_ID = 16

# What CPython + numpy use while computing on in-memory data. Everything else is EPERM.
ALLOWED_SYSCALLS = (
    # memory
    "brk", "mmap", "munmap", "mremap", "mprotect", "madvise",
    # I/O on the fds the worker left open (stdio on /dev/null, the result pipe)
    "read", "write", "readv", "writev", "close", "lseek", "fstat",
    # signals of its own (handlers, masks); it cannot send any: kill/tgkill are denied
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack", "restart_syscall",
    # time (the clock_* calls only on fixed clocks: see SeccompFilter), randomness,
    # identity, scheduling
    "nanosleep", "gettimeofday", "time", "getrandom", "getpid", "gettid", "getppid", "getuid", "geteuid", "getgid",
    "getegid", "getrusage", "times", "sched_yield", "sched_getaffinity", "sysinfo",
    "uname", "getcwd", "futex", "poll", "ppoll", "select", "pselect6", "getrlimit",
    # leaving
    "exit", "exit_group",
)


class FenceUnavailable(RuntimeError):
    """A fence that the sandbox relies on cannot be installed on this machine."""


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


def _libseccomp() -> ctypes.CDLL:
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError as e:
        raise FenceUnavailable(
            f"libseccomp not found ({e}); install it: apt-get install libseccomp2") from e
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                           ctypes.c_uint, ctypes.POINTER(_ArgCmp)]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class SeccompFilter:
    """A filter compiled once in the worker (before any fork) and installed in each child.

    libseccomp resolves names and compiles the rules to BPF here; a child only makes two
    prctl calls (about 0.7 ms saved per program over seccomp_load's compile).
    """

    def __init__(self) -> None:
        self._lib = _libseccomp()
        self._ctx = self._lib.seccomp_init(_ACT_ERRNO_EPERM)
        if not self._ctx:
            raise FenceUnavailable("seccomp_init failed")
        for name in ALLOWED_SYSCALLS:
            self._allow(name)
        # fstat is newfstatat(fd, "", buf, AT_EMPTY_PATH) in modern glibc; a path lookup
        # (os.stat('/etc/passwd'), flags without AT_EMPTY_PATH) stays denied.
        self._allow("newfstatat", _ArgCmp(3, _CMP_MASKED_EQ, _AT_EMPTY_PATH, _AT_EMPTY_PATH))
        # getrlimit is prlimit64(0, res, NULL, &old) in glibc: only its own limits (pid 0),
        # only reading them (a NULL new limit).
        self._allow("prlimit64", _ArgCmp(0, _CMP_EQ, 0, 0), _ArgCmp(2, _CMP_EQ, 0, 0))
        for cmd in FCNTL_ALLOWED.values():
            self._allow("fcntl", _ArgCmp(1, _CMP_EQ, cmd, 0))
        # F_SETFL (O_NONBLOCK and the like) only without O_ASYNC: no signal-driven I/O
        self._allow("fcntl", _ArgCmp(1, _CMP_EQ, F_SETFL, 0),
                    _ArgCmp(2, _CMP_MASKED_EQ, _O_ASYNC, 0))
        for name in ("clock_gettime", "clock_getres", "clock_nanosleep"):
            self._allow(name, _ArgCmp(0, _CMP_LT, MAX_CLOCK_ID, 0))
        self._bpf = self._export()
        self._prog = _SockFprog(len(self._bpf) // 8, ctypes.addressof(self._bpf))
        self._libc = _libc()

    def _export(self) -> ctypes.Array:
        r, w = os.pipe()  # the program is a few hundred bytes: fits a pipe's buffer
        try:
            rc = self._lib.seccomp_export_bpf(ctypes.c_void_p(self._ctx), w)
            os.close(w)
            w = -1
            if rc < 0:
                raise FenceUnavailable(f"seccomp_export_bpf failed: {os.strerror(-rc)}")
            data = b""
            while chunk := os.read(r, 65536):
                data += chunk
        finally:
            os.close(r)
            if w >= 0:
                os.close(w)
        return ctypes.create_string_buffer(data, len(data))

    def _allow(self, name: str, *cmps: _ArgCmp) -> None:
        nr = self._lib.seccomp_syscall_resolve_name(name.encode())
        if nr < 0:  # this architecture has no such call (e.g. "time" on aarch64)
            return
        arr = (_ArgCmp * len(cmps))(*cmps) if cmps else None
        rc = self._lib.seccomp_rule_add_array(self._ctx, _ACT_ALLOW, nr, len(cmps), arr)
        if rc < 0:
            raise FenceUnavailable(f"seccomp_rule_add({name}) failed: {os.strerror(-rc)}")

    def load(self) -> None:
        """Install in the calling process (irreversible; no_new_privs first, as required)."""
        if self._libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or self._libc.prctl(
                PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(self._prog), 0, 0) != 0:
            raise FenceUnavailable(f"installing seccomp failed: {os.strerror(ctypes.get_errno())}")


def _libc() -> ctypes.CDLL:
    """libc, loaded once here in the worker: a CDLL made in each child cost ~0.5 ms of CPU
    and ~100 copy-on-write page faults per program (dlopen, new ctypes classes)."""
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


_LIBC: ctypes.CDLL | None = None


def unshare_network() -> bool:
    """Move this process (and its future children) into an empty network namespace.

    Needs root (CAP_SYS_ADMIN); returns False where not permitted, leaving seccomp's
    socket denial as the only network fence.
    """
    return _libc().unshare(CLONE_NEWNET) == 0


def unshare_pids() -> bool:
    """Put this process's future children in a new PID namespace (root only; returns
    whether it happened). The first child becomes its init and must outlive the others:
    once it exits, no more processes can be created in the namespace."""
    return _libc().unshare(CLONE_NEWPID) == 0


def die_with_parent() -> None:
    """SIGKILL this process when its parent dies, so no sandbox outlives its owner."""
    _libc().prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)


def set_limits(*, address_space_bytes: int, cpu_seconds: int, max_fds: int) -> None:
    """Hard limits (soft == hard) that bind even for root; see the module docstring."""
    for res, value in (
        (resource.RLIMIT_AS, address_space_bytes),
        (resource.RLIMIT_CPU, cpu_seconds),
        (resource.RLIMIT_FSIZE, 0),
        (resource.RLIMIT_NOFILE, max_fds),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NPROC, 0),
        (resource.RLIMIT_MEMLOCK, 0),
        (resource.RLIMIT_MSGQUEUE, 0),
    ):
        resource.setrlimit(res, (value, value))


def worker_uid(worker_pid: int) -> int:
    """The uid (and gid) a worker's programs run under: unique while the worker lives."""
    return UID_BASE + worker_pid


def enter_empty_root(path: str) -> bool:
    """chroot into ``path`` (an empty directory) and cd there; returns whether it worked.

    Root chroots directly; anyone else first enters a new user namespace, where it holds
    CAP_SYS_CHROOT. Must run before the uid change (root) and before seccomp.
    """
    if os.geteuid() != 0 and _libc().unshare(CLONE_NEWUSER) != 0:
        return False
    try:
        os.chroot(path)
        os.chdir("/")
    except OSError:
        return False
    return True


def drop_privileges(uid: int) -> bool:
    """Become ``uid``:``uid`` with no groups when root; returns whether it happened."""
    if os.geteuid() != 0:
        return False
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    return True
