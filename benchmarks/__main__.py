"""`python -m benchmarks [NAME ...]`: run every benchmarks/bench_*.py (or the named ones),
each in its own process, one after another, and say which failed."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ALL = sorted(p.stem for p in Path(__file__).parent.glob("bench_*.py"))
parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0],
                                 epilog=f"benchmarks: {', '.join(ALL)} (each takes --help)")
parser.add_argument("names", nargs="*", metavar="NAME", help="bench_NAME or NAME; default: all")
names = parser.parse_args().names or ALL
unknown = [n for n in names if (n if n.startswith("bench_") else f"bench_{n}") not in ALL]
if unknown:
    parser.error(f"unknown benchmark(s) {unknown}; choose from {ALL}")
failed = []
for name in names:
    module = name if name.startswith("bench_") else f"bench_{name}"
    print(f"\n=== {module} ===", flush=True)
    started = time.time()
    code = subprocess.call([sys.executable, "-m", f"benchmarks.{module}"])
    print(f"--- {module}: {'ok' if code == 0 else f'FAILED (exit {code})'} in {time.time() - started:.0f}s", flush=True)
    if code:
        failed.append(module)
sys.exit(1 if failed else 0)
