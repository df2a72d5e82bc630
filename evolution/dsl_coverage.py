"""Which ARC tasks the DSL can solve, by enumerating every program of up to 2 steps.

    python -m evolution.dsl_coverage --split arc1-train --max-grid 10 > coverage.json
    python -m evolution.dsl_coverage --config configs/soar-smollm-arc.yaml   # primitives per split

This chose the demo and held-out task lists in configs/soar-demo.yaml: tasks where a short
DSL composition exists, so a small model can in principle solve them. With --config it says
what hindsight on the searched tasks could teach the held-out ones: which primitives each
split's shortest solutions use, and which held-out tasks some solution builds from the
searched tasks' primitives alone.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Mapping
from typing import Any

from common.config import load_config
from common.logs import setup_logging
from common.progress import progress
from evolution.config import SoarConfig
from evolution.loop import load_tasks
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


def primitive_overlap(searched: Mapping[str, ArcTask], heldout: Mapping[str, ArcTask],
                      max_steps: int = 2) -> dict[str, Any]:
    """The primitives of each split's shortest solutions, and the held-out tasks with a solution
    whose every primitive appears in some searched task's solutions (`covered`): the only
    held-out tasks whose programs learning the searched tasks' right programs can name."""
    def primitives(tasks: Mapping[str, ArcTask]) -> dict[str, list[frozenset[str]]]:
        return {tid: [frozenset(s.name for s in p) for p in solutions(t, max_steps)] for tid, t in tasks.items()}

    by_searched, by_heldout = primitives(searched), primitives(heldout)
    searched_names = set().union(*(p for sols in by_searched.values() for p in sols))
    heldout_names = set().union(*(p for sols in by_heldout.values() for p in sols))
    return {
        "searched_primitives": sorted(searched_names),
        "heldout_primitives": sorted(heldout_names),
        "heldout_only": sorted(heldout_names - searched_names),
        "covered": sorted(t for t, sols in by_heldout.items() if any(p <= searched_names for p in sols)),
        "uncovered": sorted(t for t, sols in by_heldout.items() if not any(p <= searched_names for p in sols)),
        "tasks": {t: sorted({" + ".join(sorted(p)) for p in sols}) for t, sols in {**by_searched, **by_heldout}.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", default="arc1-train")
    parser.add_argument("--max-grid", type=int, default=10)
    parser.add_argument("--max-steps", type=int, default=2)
    parser.add_argument("--config", help="a SOAR config: the primitives of its searched and held-out tasks")
    args = parser.parse_args()
    setup_logging()
    if args.config:
        cfg = load_config(args.config, SoarConfig)
        searched, heldout = load_tasks(cfg.tasks)
        out = primitive_overlap(searched, heldout, args.max_steps)
        print(json.dumps(out, indent=1))
        log.info("%d of %d held-out tasks have a solution built from the searched tasks' primitives alone",
                 len(out["covered"]), len(heldout))
        return
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
