"""An own ARC task source for SOAR: a function that returns tasks by id (docs/configuration.md).

    python -m ray_jobs.soar --config configs/soar-demo.yaml tasks.split=examples.arc_tasks:tasks \
        tasks.ids=[] tasks.heldout_ids=[] experiment=my-tasks

Each task has the shape of an ARC/Kaggle task file: train pairs with outputs, test inputs
with an output when it is known. A test input without one is searched and voted on like any
other (runs/<experiment>/attempts/<id>.json holds the two attempts), but it is not scored.
"""

from __future__ import annotations

from typing import Any


def pair(grid: list[list[int]], output: list[list[int]] | None = None) -> dict[str, Any]:
    """One example; a test input whose answer is unknown has no "output"."""
    return {"input": grid} if output is None else {"input": grid, "output": output}


def tasks() -> dict[str, dict[str, Any]]:
    """Three tiny hand-made tasks: recolour 1 -> 2, mirror left-right, and the mirror again
    with its test answer withheld (reported as "not scored")."""
    recolor = {"train": [pair([[1, 0], [0, 1]], [[2, 0], [0, 2]]),
                         pair([[1, 1, 0], [0, 0, 1]], [[2, 2, 0], [0, 0, 2]])],
               "test": [pair([[0, 1, 1], [1, 0, 0], [0, 0, 1]], [[0, 2, 2], [2, 0, 0], [0, 0, 2]])]}
    flip = {"train": [pair([[3, 0, 0], [3, 4, 0]], [[0, 0, 3], [0, 4, 3]]),
                      pair([[0, 5], [5, 5], [4, 0]], [[5, 0], [5, 5], [0, 4]])],
            "test": [pair([[3, 3, 0], [0, 4, 0], [5, 0, 0]], [[0, 3, 3], [0, 4, 0], [0, 0, 5]])]}
    unknown = {"train": flip["train"], "test": [pair([[4, 0, 0], [3, 3, 0]])]}  # no "output": not scored
    return {"recolor-1-to-2": recolor, "flip-left-right": flip, "flip-answer-unknown": unknown}
