"""The final answer (SOAR): programs vote for their test outputs, weighted by train accuracy.

Programs that agree on every test output form a group; its weight is the sum over its
programs of (1 + c * h). With c = 1000 one program right on a train pair outweighs
hundreds of agreeing programs that are right on none, while agreement still breaks ties
between equally accurate programs. The top-2 groups are ARC's two attempts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from evolution.records import Candidate
from verifiers.arc.grids import ArcTask, Grid
from verifiers.arc.scoring import pass_at_2


@dataclass(frozen=True)
class VoteConfig:
    c: float = 1000.0  # weight of train accuracy h in each vote (1 + c*h); paper: 1000
    # False (paper): attempt_2 is the second group's grid even where it equals attempt_1.
    # True: attempt_2 comes from the best group whose grid differs there (helps tasks with
    # several test inputs, where the top-2 groups can agree on one input).
    distinct_attempts: bool = False

    def __post_init__(self) -> None:
        if not (self.c >= 0 and math.isfinite(self.c)):
            raise ValueError(f"c: {self.c} must be a finite number >= 0 (the paper uses 1000)")


@dataclass(frozen=True)
class VoteGroup:
    outputs: tuple[Grid, ...]  # one grid per test input: what the group's programs agree on
    weight: float  # sum of (1 + c * h) over its programs
    max_train_accuracy: float
    code_hashes: tuple[str, ...]  # its programs, best first (h desc, then hash)

    @property
    def size(self) -> int:
        return len(self.code_hashes)


@dataclass(frozen=True)
class VoteResult:
    task_id: str
    attempts: tuple[tuple[Grid, ...], ...]  # per test input: 0, 1 or 2 grids, best first
    groups: tuple[VoteGroup, ...]  # every group, ranked; groups[:2] gave the attempts
    n_voters: int  # distinct programs with a grid for every test input
    # per test input: the index in `groups` of the group behind each attempt (distinct_attempts
    # may skip a group whose grid repeats the first attempt's)
    attempt_groups: tuple[tuple[int, ...], ...] = ()

    @property
    def chosen(self) -> tuple[str, ...]:
        """The best program of each of the (up to two) chosen groups."""
        return tuple(g.code_hashes[0] for g in self.groups[:2])

    def to_submission(self) -> list[dict[str, Any]]:
        """Kaggle format for this task: one {"attempt_1", "attempt_2"} per test input."""
        return [{f"attempt_{i + 1}": [list(r) for r in g] for i, g in enumerate(tries)}
                for tries in self.attempts]


def _rank_key(g: VoteGroup) -> tuple[float, float, int, str]:
    # Deterministic ties: weight, then best accuracy, then more programs, then smallest hash.
    return (-g.weight, -g.max_train_accuracy, -g.size, min(g.code_hashes))


def vote(candidates: Iterable[Candidate], task: ArcTask, cfg: VoteConfig | None = None) -> VoteResult:
    """Group ``candidates`` by their test outputs and pick the two heaviest groups.

    A program votes once however often it appears (identity is its code hash); one
    without a grid for every test input does not vote (filter before, see filters.py).
    """
    cfg = cfg or VoteConfig()
    n_test = len(task.test)
    members: dict[tuple[Grid, ...], dict[str, float]] = {}
    for c in candidates:
        if c.task_id != task.id:
            raise ValueError(f"candidates: {c.code_hash} is for task {c.task_id!r}, not {task.id!r}")
        outs = c.test_outputs
        if len(outs) != n_test or any(g is None for g in outs):
            continue
        members.setdefault(outs, {}).setdefault(c.code_hash, c.train_accuracy)  # type: ignore[arg-type]
    groups = []
    for outs, accs in members.items():
        hashes = tuple(sorted(accs, key=lambda h: (-accs[h], h)))
        groups.append(VoteGroup(
            outputs=outs,
            weight=math.fsum(1.0 + cfg.c * h for h in accs.values()),  # order-independent sum
            max_train_accuracy=max(accs.values()),
            code_hashes=hashes))
    groups.sort(key=_rank_key)
    attempts, sources = [], []
    for i in range(n_test):
        picked = list(range(min(2, len(groups))))
        if cfg.distinct_attempts and groups:
            first = groups[0].outputs[i]
            picked = [0] + [k for k, g in enumerate(groups) if g.outputs[i] != first][:1]  # never 0 itself
        attempts.append(tuple(groups[k].outputs[i] for k in picked))
        sources.append(tuple(picked))
    return VoteResult(task.id, tuple(attempts), tuple(groups), sum(g.size for g in groups), tuple(sources))


def score_task(result: VoteResult, task: ArcTask) -> float | None:
    """pass@2 with fractional credit; None when the task's test outputs are unknown."""
    expected = [ex.output for ex in task.test]
    if any(e is None for e in expected):
        return None
    return pass_at_2([list(t) for t in result.attempts], expected)  # type: ignore[arg-type]


def oracle(candidates: Iterable[Candidate], task: ArcTask) -> float | None:
    """Fraction of test inputs some candidate got right: the ceiling for any vote."""
    expected = [ex.output for ex in task.test]
    if any(e is None for e in expected):
        return None
    solved = [False] * len(expected)
    for c in candidates:
        for i, (out, want) in enumerate(zip(c.test_outputs, expected, strict=False)):
            solved[i] = solved[i] or (out is not None and out == want)
    return sum(solved) / len(expected)


@dataclass(frozen=True)
class CurvePoint:
    n: int  # programs tried (the budget; capped at the number available)
    pass_at_2: float
    oracle: float


def curve(candidates_in_sample_order: Sequence[Candidate], task: ArcTask,
          budgets: Iterable[int], *, keep: Callable[[Candidate], bool] | None = None,
          cfg: VoteConfig | None = None, tried_at: Callable[[Candidate], int] | None = None) -> list[CurvePoint]:
    """pass@2 and oracle after the first n programs tried, for each n in ``budgets``.

    ``keep`` (e.g. ``lambda c: keep_for_voting(c, task)``) filters the voters only: a
    dropped program still counts as tried, and the oracle sees every program.
    ``tried_at(c)`` is the number of programs tried before ``c`` (duplicates and programs
    with no code included, as the search counts them); by default a candidate's index.
    """
    if any(e.output is None for e in task.test):
        raise ValueError(f"task {task.id!r}: test outputs are needed for a curve")
    points = []
    for n in sorted(set(budgets)):
        if n < 1:
            raise ValueError(f"budgets: {n} must be >= 1 (number of programs tried)")
        seen = [c for i, c in enumerate(candidates_in_sample_order) if (i if tried_at is None else tried_at(c)) < n]
        voters = [c for c in seen if keep is None or keep(c)]
        tried = n if tried_at is not None else min(n, len(candidates_in_sample_order))
        points.append(CurvePoint(tried, score_task(vote(voters, task, cfg), task) or 0.0, oracle(seen, task) or 0.0))
    return points
