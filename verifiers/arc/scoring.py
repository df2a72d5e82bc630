"""Scoring: per-input comparison, per-program train accuracy, ARC's pass@2.

All comparisons are between Grids (tuples of ints) that grids.py built from plain data,
never with an object a program returned.

pass@2 (ARC Prize rules): a task may have several test inputs; for each one a solver
submits up to two attempts, and the test input counts as solved when either equals the
expected grid exactly. A task scores the fraction of its test inputs solved (fractional
credit), and a submission scores the sum over tasks (reported also as a fraction).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from verifiers.arc.grids import ArcTask, Grid, GridError, validate_grid
from verifiers.arc.results import InputResult, ProgramResult


def dims(grid: Grid) -> tuple[int, int]:
    """(rows, columns) of a grid; grids.py builds only rectangular ones."""
    return len(grid), len(grid[0])


def cell_accuracy(output: Grid, expected: Grid) -> float:
    """Fraction of equal cells when the shapes match, else 0.0."""
    if dims(output) != dims(expected):
        return 0.0
    same = sum(a == b for ro, re in zip(output, expected, strict=True) for a, b in zip(ro, re, strict=True))
    rows, cols = dims(expected)
    return same / (rows * cols)


def score_input(execution: InputResult, expected: Grid | None) -> InputResult:
    """Add correct / shape_match / cell_accuracy (left None when nothing is expected)."""
    if expected is None:
        return execution
    out = execution.output
    if out is None:
        return replace(execution, correct=False, shape_match=False, cell_accuracy=0.0)
    return replace(execution, correct=out == expected, shape_match=dims(out) == dims(expected),
                   cell_accuracy=cell_accuracy(out, expected))


def train_accuracy(result: ProgramResult) -> float:
    """Fraction of train examples solved exactly (SOAR's h, used by REX and voting)."""
    return result.train_accuracy


def pass_at_2(attempts: Sequence[Sequence[Grid | None]], expected: Sequence[Grid]) -> float:
    """Fraction of a task's test inputs solved by one of (at most) two attempts each."""
    if len(attempts) != len(expected):
        raise ValueError(f"attempts: got {len(attempts)} lists for {len(expected)} test inputs; "
                         "give one list of up to 2 grids per test input")
    if not expected:
        raise ValueError("expected: a task has at least one test input")
    solved = 0
    for i, (tries, answer) in enumerate(zip(attempts, expected, strict=True)):
        if len(tries) > 2:
            raise ValueError(f"attempts[{i}]: {len(tries)} attempts, pass@2 allows at most 2")
        solved += any(t is not None and t == answer for t in tries)
    return solved / len(expected)


@dataclass(frozen=True)
class SubmissionScore:
    score: float                 # sum of per-task fractional credit
    total: int                   # number of tasks scored
    per_task: dict[str, float]

    @property
    def fraction(self) -> float:
        return self.score / self.total if self.total else 0.0


def score_submission(submission: Mapping[str, Sequence[Mapping[str, Any]]],
                     tasks: Mapping[str, ArcTask]) -> SubmissionScore:
    """Score a Kaggle-format submission ``{task_id: [{"attempt_1": grid, "attempt_2": grid},
    ...one per test input]}`` against tasks with known test outputs. A task missing from
    the submission scores 0; an attempt that is not a valid grid counts as wrong."""
    per_task: dict[str, float] = {}
    for task_id, task in tasks.items():
        expected = [ex.output for ex in task.test]
        if any(e is None for e in expected):
            raise ValueError(f"tasks[{task_id!r}]: test outputs are needed to score")
        entries = submission.get(task_id, [])
        attempts = []
        for i in range(len(expected)):
            entry = entries[i] if i < len(entries) and isinstance(entries[i], Mapping) else {}
            attempts.append([_grid_or_none(entry.get(k)) for k in ("attempt_1", "attempt_2")])
        per_task[task_id] = pass_at_2(attempts, expected)  # type: ignore[arg-type]
    return SubmissionScore(sum(per_task.values()), len(per_task), per_task)


def _grid_or_none(obj: Any) -> Grid | None:
    if obj is None:
        return None
    try:
        return validate_grid(obj)
    except GridError:
        return None
