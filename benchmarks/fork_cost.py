"""What one fork-per-program costs before any program runs: fork, exit and reap of a process.

    python -m benchmarks.fork_cost          # the sandbox worker's preloads, and a bare interpreter

The ARC sandbox runs every program in a fresh child of its warm worker, so each program pays a
fork (the worker's page tables are copied), the child's exit (they are torn down) and a reap,
whatever the program does. This measures exactly that, in a fresh interpreter that holds what
the worker holds (verifiers/arc/zygote.py's preloads, garbage collected and frozen as there),
and in one that holds nothing: a lower bound on the sandbox's CPU per program that no change
to the fencing, the hand-off or the decoding can go below. bench_arc prints it beside its
ratios.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ARC_DIR = Path(__file__).resolve().parent.parent / "verifiers" / "arc"

_PROBE = """
import ctypes, gc, json, os, resource, sys, time
if sys.argv[1] == "worker":
    sys.path.insert(0, sys.argv[2])
    import zygote
    zygote._preload(list(zygote.STDLIB_ALLOWED) + list(zygote.NUMPY_PRELOAD))
gc.collect()
gc.freeze()
libc = ctypes.CDLL(None)
n = int(sys.argv[3])
def cpu():  # microsecond resolution (os.times counts clock ticks): this process and its reaped children
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))
t0, c0 = time.perf_counter(), cpu()
for _ in range(n):
    pid = libc.fork()  # as the worker forks: no CPython after-fork work in the child
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
t1, c1 = time.perf_counter(), cpu()
with open("/proc/self/smaps_rollup") as f:
    anon = next(int(line.split()[1]) for line in f if line.startswith("Anonymous:"))
print(json.dumps({"wall_ms": 1000 * (t1 - t0) / n, "cpu_ms": 1000 * (c1 - c0) / n, "anon_kb": anon,
                  "mappings": sum(1 for _ in open("/proc/self/maps"))}))
"""


def fork_exit_cost(kind: str, forks: int = 400) -> dict[str, float]:
    """Per fork + exit + reap: wall and CPU milliseconds, and the process's anonymous memory and
    mappings. `kind`: "worker" (the sandbox worker's preloads) or "bare" (a bare interpreter)."""
    if kind not in ("worker", "bare"):
        raise ValueError(f"kind={kind!r}: must be 'worker' or 'bare'")
    out = subprocess.run([sys.executable, "-c", _PROBE, kind, str(ARC_DIR), str(forks)],
                         capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"})
    return json.loads(out.stdout)


def main() -> None:
    for kind in ("worker", "bare"):
        r = fork_exit_cost(kind)
        print(f"fork + exit + reap, {kind:<6}: {r['wall_ms']:.3f} ms wall, {r['cpu_ms']:.3f} ms CPU "
              f"({r['anon_kb'] / 1024:.1f} MB anonymous memory, {r['mappings']} mappings)")


if __name__ == "__main__":
    main()
