"""Every argument rule of the sandbox's seccomp filter, probed from inside the sandbox.

A rule that allows a system call only with some arguments (fence.SeccompFilter) is a promise:
each probe here makes the call with an argument the rule forbids and asserts EPERM (the
filter's answer), and with one it allows and asserts the kernel saw it. The forbidden
arguments are ones the kernel itself would accept (reading this process's own CPU clock by
pid, setting a limit to its current value, stat of "/"), so widening any rule turns an EPERM
into a success and fails a test. Programs reach raw system calls through ctypes, as hostile
ones do.
"""

from __future__ import annotations

import os

import pytest

from verifiers.arc import fence
from verifiers.arc.sandbox import SandboxLimits, SandboxWorker, decode_run

OK, DENIED, REFUSED = 0, 1, 2  # success; EPERM (the filter); another error (the kernel)
NR = {name: fence._libseccomp().seccomp_syscall_resolve_name(name.encode())
      for name in ("fcntl", "prlimit64", "newfstatat", "clock_gettime", "clock_getres", "clock_nanosleep", "gettid")}

PRELUDE = """import sys
ctypes = sys.modules['ctypes']
os = sys.modules['os']
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {nr!r}
ME, TID = os.getpid(), libc.syscall(NR['gettid'])
BUF = ctypes.create_string_buffer(256)
ZERO = ctypes.create_string_buffer(16)  # a zero timespec: sleeping on it returns at once

def sc(name, *args):
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(NR[name]), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    if rc >= 0:
        return 0, rc
    return (1 if ctypes.get_errno() == 1 else 2), rc

def code(name, *args):
    return sc(name, *args)[0]

def fcntl(cmd, arg=0):
    c, rc = sc('fcntl', 0, cmd, arg)
    if c == 0 and cmd in (0, 1030):  # F_DUPFD, F_DUPFD_CLOEXEC made an fd: give it back
        os.close(rc)
    if c == 0 and cmd == 4:  # F_SETFL: back to plain flags on the shared /dev/null
        sc('fcntl', 0, 4, 0)
    return c

def nofile_limit():
    c, _ = sc('prlimit64', 0, 7, 0, BUF)  # RLIMIT_NOFILE, read only
    soft, hard = int.from_bytes(BUF.raw[:8], 'little'), int.from_bytes(BUF.raw[8:16], 'little')
    return c if c else (0 if 0 < soft == hard <= 64 else 2)  # the few fds the sandbox grants, soft = hard

def set_nofile_to_itself(pid):
    cur = ctypes.create_string_buffer(16)
    sc('prlimit64', 0, 7, 0, cur)
    return code('prlimit64', pid, 7, cur, 0)

PROBES = [
{probes}
]

def transform(g):
    codes = [p() for p in PROBES]
    codes += [0] * (-len(codes) % 30)
    return [codes[i:i + 30] for i in range(0, len(codes), 30)]
"""

LIMITS = SandboxLimits(setup_cpu_s=5.0, input_cpu_s=5.0, wall_factor=20.0)


@pytest.fixture(scope="module")
def worker():
    w = SandboxWorker()
    w.start()
    yield w
    w.close()


def run_probes(worker: SandboxWorker, probes: dict[str, str]) -> dict[str, int]:
    """{label: OK | DENIED | REFUSED} for each probe (a Python expression) run in one program."""
    assert len(probes) <= 900, "one program returns at most a 30x30 grid"
    program = PRELUDE.format(nr=NR, probes="\n".join(f"    lambda: {p}," for p in probes.values()))
    [result] = decode_run(worker.run("fence-rules", [[[0]]], LIMITS, program), 1)
    assert result.status == "ok", result
    cells = [c for row in result.output for c in row]
    return dict(zip(probes, cells[:len(probes)], strict=True))


def assert_outcomes(got: dict[str, int], want: dict[str, set[int]]) -> None:
    wrong = {label: got[label] for label, allowed in want.items() if got[label] not in allowed}
    names = {OK: "ok", DENIED: "EPERM", REFUSED: "other error"}
    assert not wrong, {label: f"got {names[c]}, want one of {sorted(names[w] for w in want[label])}"
                       for label, c in wrong.items()}


# -- fcntl: only the commands in FCNTL_ALLOWED, and F_SETFL without O_ASYNC ------------------------
O_APPEND, O_NONBLOCK, O_ASYNC = 0o2000, 0o4000, 0o20000
F_SETFL = 4
ALLOWED_FCNTL = {0: "F_DUPFD", 1: "F_GETFD", 2: "F_SETFD", 3: "F_GETFL", 1030: "F_DUPFD_CLOEXEC"}
# every command Linux knows lives in 0..63 or 1024..1087; the rest are swept too
FCNTL_SWEEP = [c for c in [*range(64), *range(1024, 1088)] if c not in ALLOWED_FCNTL and c != F_SETFL]


def test_fcntl_allows_exactly_its_commands(worker):
    probes = {f"fcntl {name}": f"fcntl({cmd}, {5 if cmd in (0, 1030) else 0})"
              for cmd, name in ALLOWED_FCNTL.items()}
    probes |= {f"fcntl cmd {cmd}": f"fcntl({cmd})" for cmd in FCNTL_SWEEP}
    want = {label: {OK} for label in list(probes)[:len(ALLOWED_FCNTL)]}
    want |= {f"fcntl cmd {cmd}": {DENIED} for cmd in FCNTL_SWEEP}
    assert_outcomes(run_probes(worker, probes), want)


def test_fcntl_setfl_only_without_o_async(worker):
    # F_SETOWN + F_SETSIG + O_ASYNC made the kernel signal a chosen pid (test_arc_holes)
    probes = {"F_SETFL 0": "fcntl(4, 0)", "F_SETFL O_NONBLOCK": f"fcntl(4, {O_NONBLOCK})",
              "F_SETFL O_ASYNC": f"fcntl(4, {O_ASYNC})",
              "F_SETFL O_ASYNC|O_NONBLOCK": f"fcntl(4, {O_ASYNC | O_NONBLOCK})",
              "F_SETFL O_APPEND|O_NONBLOCK": f"fcntl(4, {O_APPEND | O_NONBLOCK})",
              "F_SETFL O_WRONLY|O_NONBLOCK": f"fcntl(4, {1 | O_NONBLOCK})"}  # access bits: F_SETFL ignores them
    got = run_probes(worker, probes)
    assert_outcomes(got, {"F_SETFL 0": {OK}, "F_SETFL O_NONBLOCK": {OK}, "F_SETFL O_ASYNC": {DENIED},
                          "F_SETFL O_ASYNC|O_NONBLOCK": {DENIED}, "F_SETFL O_APPEND|O_NONBLOCK": {OK},
                          "F_SETFL O_WRONLY|O_NONBLOCK": {OK}})  # the mask is O_ASYNC's one bit, no wider


# -- prlimit64: only pid 0 (itself), only reading (NULL new limit) --------------------------------
def test_prlimit64_only_reads_its_own_limits(worker):
    probes = {
        "read own limit (pid 0)": "nofile_limit()",
        "read own limit by pid": "code('prlimit64', ME, 7, 0, BUF)",
        "set own limit to itself (pid 0)": "set_nofile_to_itself(0)",
        "set own limit to itself by pid": "set_nofile_to_itself(ME)",
    }
    assert_outcomes(run_probes(worker, probes), {
        "read own limit (pid 0)": {OK}, "read own limit by pid": {DENIED},
        "set own limit to itself (pid 0)": {DENIED}, "set own limit to itself by pid": {DENIED}})


# -- newfstatat: only fstat's form (AT_EMPTY_PATH) -----------------------------------------------
def test_newfstatat_only_with_at_empty_path(worker):
    probes = {
        "fstat(0)": "code('newfstatat', 0, b'', BUF, 0x1000)",
        "stat('/')": "code('newfstatat', -100, b'/', BUF, 0)",
        "lstat('/')": "code('newfstatat', -100, b'/', BUF, 0x100)",
        "fd 0 empty path, no AT_EMPTY_PATH": "code('newfstatat', 0, b'', BUF, 0)",
    }
    assert_outcomes(run_probes(worker, probes), {
        "fstat(0)": {OK}, "stat('/')": {DENIED}, "lstat('/')": {DENIED},
        "fd 0 empty path, no AT_EMPTY_PATH": {DENIED}})


# -- clocks: only the fixed ids 0..15, never a process's or thread's CPU clock by id ----------------
CLOCK_CALLS = {"clock_gettime": "code('clock_gettime', {id}, BUF)",
               "clock_getres": "code('clock_getres', {id}, BUF)",
               "clock_nanosleep": "code('clock_nanosleep', {id}, 0, ZERO, 0)"}
# A CPU clock id is ((~pid) << 3) | type (type 0 prof, 1 virt, 2 sched; | 4 for a thread's):
# the kernel lets a process read any process's that it may see, its own included.
DYNAMIC = {"own process cpu clock by pid": "((~ME) << 3) | 2", "own process prof clock by pid": "((~ME) << 3)",
           "own thread cpu clock by tid": "((~TID) << 3) | 6", "parent's cpu clock": "((~os.getppid()) << 3) | 2",
           "pid 0 cpu clock (itself)": "-6", "most negative id": str(-2**31)}
FIXED = range(16)


@pytest.mark.parametrize("call", sorted(CLOCK_CALLS))
def test_clocks_only_the_fixed_ones(worker, call):
    ids = {f"{call}({i})": str(i) for i in [*range(-20, 0), *range(40), 2**31 - 1]}
    ids |= {f"{call}: {name}": expr for name, expr in DYNAMIC.items()}
    got = run_probes(worker, {label: CLOCK_CALLS[call].format(id=expr) for label, expr in ids.items()})
    want = {}
    for label, expr in ids.items():
        fixed = expr.lstrip("-").isdigit() and int(expr) in FIXED
        if not fixed:
            want[label] = {DENIED}
        elif call == "clock_nanosleep" and int(expr) in (8, 9):
            want[label] = {OK, DENIED, REFUSED}  # alarm clocks: the kernel's own EPERM without CAP_WAKE_ALARM
        else:
            want[label] = {OK, REFUSED}  # reaches the kernel (ids 10, 12..15 name no clock: EINVAL)
    for common in (0, 1):  # realtime and monotonic work with every call
        want[f"{call}({common})"] = {OK}
    if call != "clock_nanosleep":
        for cpu in (2, 3):  # its own process and thread CPU clocks, by their fixed ids
            want[f"{call}({cpu})"] = {OK}
    assert_outcomes(got, want)


def test_every_conditional_rule_has_probes():
    # A new argument rule in fence.SeccompFilter needs its probes here.
    seen: set[str] = set()

    class Recording(fence.SeccompFilter):
        def _allow(self, name: str, *cmps) -> None:
            if cmps:
                seen.add(name)
            super()._allow(name, *cmps)

    Recording()
    probed = {"fcntl", "prlimit64", "newfstatat", *CLOCK_CALLS}
    assert seen == probed, f"argument rules without probes: {sorted(seen - probed)}"



# -- building the filter: what it skips and how it fails -----------------------------------------
def test_a_call_this_architecture_lacks_is_skipped_and_a_rule_libseccomp_refuses_is_named():
    """ALLOWED_SYSCALLS names calls some architectures lack ("time" on aarch64): those are left
    out, not an error. A rule libseccomp refuses stops the sandbox with libseccomp's reason."""
    f = fence.SeccompFilter()
    f._allow("no_such_call_anywhere")  # resolves to no number: nothing to allow
    with pytest.raises(fence.FenceUnavailable, match=r"seccomp_rule_add\(read\) failed: Invalid argument"):
        f._allow("read", fence._ArgCmp(7, fence._CMP_EQ, 0, 0))  # system calls have 6 arguments


def test_a_filter_libseccomp_cannot_build_stops_the_sandbox_with_its_reason():
    """libseccomp answers -errno; -1 (EPERM) is an error too, not a success."""
    f = fence.SeccompFilter()

    class Refusing:
        def seccomp_syscall_resolve_name(self, name):
            return 0

        def seccomp_rule_add_array(self, ctx, action, nr, count, cmps):
            return -1

        def seccomp_export_bpf(self, ctx, fd):
            return -1

    f._lib = Refusing()
    with pytest.raises(fence.FenceUnavailable, match=r"seccomp_rule_add\(read\) failed: Operation not permitted"):
        f._allow("read")
    with pytest.raises(fence.FenceUnavailable, match="seccomp_export_bpf failed: Operation not permitted"):
        f._export()


def test_building_a_filter_closes_its_own_pipe_and_no_other_descriptor():
    """The worker builds the filter before it forks each sandbox: a descriptor left open leaks
    into every child, and closing a wrong one (stdin, stdout) breaks the worker itself."""
    before = sorted(os.listdir("/proc/self/fd"))
    fence.SeccompFilter()
    assert sorted(os.listdir("/proc/self/fd")) == before
