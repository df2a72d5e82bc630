"""Which ARC tasks the DSL can solve, by enumerating every program of up to 2 steps.

    python -m evolution.dsl_coverage --split arc1-train --max-grid 10 > coverage.json

This chose the demo and held-out task lists in configs/soar-demo.yaml: tasks where a short
DSL composition exists, so a small model can in principle solve them.
"""

from __future__ import annotations

import argparse
import json
import logging

from common.logs import setup_logging
from common.progress import progress
from evolution.programs import Step, colours, render, run, steps_for
from evolution.tasks import load_split, select
from verifiers.arc.grids import ArcTask

log = logging.getLogger(__name__)


def solutions(task: ArcTask, max_steps: int = 2) -> list[tuple[Step, ...]]:
    """Shortest DSL programs right on every train and test pair (empty when none)."""
    pairs = [(ex.input, ex.output) for ex in task.train + task.test]
    steps = steps_for(colours([p[0] for p in pairs]), colours([p[1] for p in pairs]))
    found = [(s,) for s in steps if all(run((s,), i) == o for i, o in pairs)]
    if found or max_steps < 2:
        return found
    first_in = pairs[0][0]
    for a in steps:
        mid = run((a,), first_in)
        if mid is None:
            continue
        for b in steps:
            if run((b,), mid) == pairs[0][1] and all(run((a, b), i) == o for i, o in pairs[1:]):
                found.append((a, b))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", default="arc1-train")
    parser.add_argument("--max-grid", type=int, default=10)
    parser.add_argument("--max-steps", type=int, default=2)
    args = parser.parse_args()
    setup_logging()
    tasks = select(load_split(args.split), max_grid=args.max_grid)
    out = {}
    with progress(total=len(tasks), desc="tasks", unit="task") as bar:
        for tid, task in tasks.items():
            sols = solutions(task, args.max_steps)
            if sols:
                out[tid] = {"steps": len(sols[0]), "programs": len(sols), "example": render(sols[0])}
            bar.update(1)
    print(json.dumps(out, indent=1))  # the product, on stdout
    log.info("%d of %d tasks solvable in <= %d steps", len(out), len(tasks), args.max_steps)


if __name__ == "__main__":
    main()
