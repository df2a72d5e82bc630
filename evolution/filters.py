"""Filters before refinement and voting (SOAR): drop programs whose outputs carry no
evidence of a rule, so they neither win votes nor waste refinement calls.

Each check names one reason; ``reasons_to_drop`` lists every reason that applies, so a job
can report what the filters removed. Checks that could reject a right answer have a guard
taken from the task itself (e.g. background-only outputs are allowed when a train output is
background-only, as in 239be575 and e872b94a).
"""

from __future__ import annotations

import ast
import functools
import warnings
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal, get_args

from evolution.records import Candidate
from verifiers.arc.grids import ArcTask, Grid

Reason = Literal["error", "invalid_grid", "background_only", "identical_outputs",
                 "identity", "hardcoded_output", "long_line"]
REASONS: tuple[Reason, ...] = get_args(Reason)
BACKGROUND = 0


@dataclass(frozen=True)
class FilterConfig:
    drop_errors: bool = True  # "error" / "invalid_grid": not all_ok (crash, timeout, bad grid)
    drop_background_only: bool = True  # a test output with every cell 0
    drop_identical_outputs: bool = True  # the same grid for every input (needs >= 2 inputs)
    drop_identity: bool = True  # output == input on most train pairs
    identity_fraction: float = 0.5  # "most": strictly more than this fraction of train pairs
    drop_hardcoded: bool = True  # a grid literal in the code equals a train or own test output
    # 3x3 and smaller fixed patterns are legitimate answers (ff28f65a writes one of two 3x3
    # patterns); a literal matching an output this large is memorised, not computed.
    min_hardcoded_cells: int = 10
    max_line_chars: int | None = 300  # any longer line -> "long_line"; None disables
    # Reasons that do not bar refinement, e.g. ("error",) lets REX repair crashing programs.
    refine_ignores: tuple[Reason, ...] = field(default=())

    def __post_init__(self) -> None:
        if not 0.0 <= self.identity_fraction < 1.0:
            raise ValueError(f"identity_fraction: {self.identity_fraction} is outside [0, 1); "
                             "0.5 drops programs that copy the input on more than half the pairs")
        if self.min_hardcoded_cells < 1:
            raise ValueError(f"min_hardcoded_cells: {self.min_hardcoded_cells} must be >= 1")
        if self.max_line_chars is not None and self.max_line_chars < 1:
            raise ValueError(f"max_line_chars: {self.max_line_chars} must be >= 1, or None to disable")
        unknown = set(self.refine_ignores) - set(REASONS)
        if unknown:
            raise ValueError(f"refine_ignores: unknown reasons {sorted(unknown)}; known: {REASONS}")


def reasons_to_drop(c: Candidate, task: ArcTask, cfg: FilterConfig | None = None) -> list[Reason]:
    """Every filter reason that applies to ``c`` on ``task`` (empty: keep it)."""
    cfg = cfg or FilterConfig()
    reasons: list[Reason] = []
    n_train, n_test = len(task.train), len(task.test)
    outputs_ok = (c.all_ok and len(c.train_outputs) == n_train and len(c.test_outputs) == n_test
                  and all(g is not None for g in c.train_outputs + c.test_outputs))
    if cfg.drop_errors and not outputs_ok:
        reasons.append("invalid_grid" if "invalid_output" in c.statuses else "error")
    test_outs = [g for g in c.test_outputs if g is not None]
    train_outs = [g for g in c.train_outputs if g is not None]
    if (cfg.drop_background_only and any(_blank(g) for g in test_outs)
            and not any(_blank(ex.output) for ex in task.train if ex.output is not None)):
        reasons.append("background_only")
    every = train_outs + test_outs
    expected_train = [ex.output for ex in task.train]
    if (cfg.drop_identical_outputs and len(every) >= 2
            and all(g == every[0] for g in every) and len(set(expected_train)) > 1):
        reasons.append("identical_outputs")
    if cfg.drop_identity and train_outs:
        # A copy counts only where the answer differs from the input (22eb0ac0 has pairs
        # whose answer is the input itself; copying there is right, not lazy).
        copies = sum(out is not None and out == ex.input and ex.output != ex.input
                     for out, ex in zip(c.train_outputs, task.train, strict=False))
        if copies > cfg.identity_fraction * n_train:
            reasons.append("identity")
    if cfg.drop_hardcoded:
        targets = {g for g in expected_train + test_outs
                   if g is not None and _cells(g) >= cfg.min_hardcoded_cells}
        if targets and grid_literals(c.code) & targets:
            reasons.append("hardcoded_output")
    if cfg.max_line_chars is not None and any(
            len(line) > cfg.max_line_chars for line in c.code.splitlines()):
        reasons.append("long_line")
    return reasons


def keep_for_voting(c: Candidate, task: ArcTask, cfg: FilterConfig | None = None) -> bool:
    return not reasons_to_drop(c, task, cfg)


def keep_for_refinement(c: Candidate, task: ArcTask, cfg: FilterConfig | None = None) -> bool:
    cfg = cfg or FilterConfig()
    return not set(reasons_to_drop(c, task, cfg)) - set(cfg.refine_ignores)


def partition(candidates: Iterable[Candidate], task: ArcTask, cfg: FilterConfig | None = None,
              *, purpose: Literal["voting", "refinement"] = "voting",
              ) -> tuple[list[Candidate], Counter[str]]:
    """(kept candidates, count of each reason among the dropped) for a job's report."""
    cfg = cfg or FilterConfig()
    ignored = set(cfg.refine_ignores) if purpose == "refinement" else set()
    kept: list[Candidate] = []
    dropped: Counter[str] = Counter()
    for c in candidates:
        reasons = set(reasons_to_drop(c, task, cfg)) - ignored
        if reasons:
            dropped.update(reasons)
        else:
            kept.append(c)
    return kept, dropped


@functools.lru_cache(maxsize=1 << 14)  # REX re-filters the same programs every batch
def grid_literals(code: str) -> frozenset[Grid]:
    """Every 2-D literal of ints in ``code`` (lists or tuples of rows), e.g. the ``[[1, 2],
    [3, 4]]`` in ``return np.array([[1, 2], [3, 4]])``. Empty when the code does not parse."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset()
    found: set[Grid] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.List | ast.Tuple) and node.elts:
            rows = [_int_row(e) for e in node.elts]
            if all(r is not None for r in rows):
                found.add(tuple(rows))  # type: ignore[arg-type]
    return frozenset(found)


def _int_row(node: ast.expr) -> tuple[int, ...] | None:
    if not isinstance(node, ast.List | ast.Tuple) or not node.elts:
        return None
    row = []
    for e in node.elts:
        if not (isinstance(e, ast.Constant) and type(e.value) is int):  # bool is not a colour
            return None
        row.append(e.value)
    return tuple(row)


def _blank(g: Grid | None) -> bool:
    return g is not None and all(v == BACKGROUND for row in g for v in row)


def _cells(g: Grid) -> int:
    return len(g) * len(g[0])
