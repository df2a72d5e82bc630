"""Each searched task's answer as data: runs/<experiment>/attempts/<task>.json.

    {"task_id": "...", "iteration": 0, "model_version": "v0", "solved": 1.0,   # null: not scored
     "tests": [{"input": grid, "expected": grid | null,
                "attempts": [{"output": grid, "correct": true | false | null, "votes": 3, "weight": 3001.0,
                              "programs": [{"code_hash": "...", "train_accuracy": 1.0, "code": "..."}]}]}]}

Grids are lists of rows of ints, as in a task file. The attempts are the weighted vote's (up
to two per test input, best first), recomputed from the search's programs exactly as the
metrics are; `correct` and `solved` are null when the task's test outputs are unknown.
Written beside the PNGs, for every task (renderings cover only `render_tasks` of them).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from common.jsonio import dumps
from evolution.driver import TaskOutcome
from evolution.filters import FilterConfig, keep_for_voting
from evolution.voting import VoteConfig, score_task, vote
from verifiers.arc.grids import ArcTask, Grid

DIR = "attempts"
MAX_PROGRAMS = 5  # programs listed per attempt, best first: a group can hold hundreds that agree


def file_stem(task_id: str) -> str:
    """A file name for a task id from any source (a user's id may hold '/' or spaces)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", task_id)


def _grid(grid: Grid | None) -> list[list[int]] | None:
    return None if grid is None else [list(row) for row in grid]


def task_attempts(task: ArcTask, outcome: TaskOutcome, filters: FilterConfig, vote_cfg: VoteConfig) -> dict[str, Any]:
    """The task's attempts per test input, with the programs behind each and their verdicts."""
    voters = [c for c in outcome.candidates if keep_for_voting(c, task, filters)]
    result = vote(voters, task, vote_cfg)
    by_hash = {c.code_hash: c for c in voters}
    tests = []
    for i, ex in enumerate(task.test):
        tries = []
        for grid, k in zip(result.attempts[i], result.attempt_groups[i], strict=True):
            group = result.groups[k]
            programs = [{"code_hash": h, "train_accuracy": by_hash[h].train_accuracy, "code": by_hash[h].code}
                        for h in group.code_hashes[:MAX_PROGRAMS]]
            tries.append({"output": _grid(grid), "correct": None if ex.output is None else grid == ex.output,
                          "votes": group.size, "weight": group.weight, "programs": programs})
        tests.append({"input": _grid(ex.input), "expected": _grid(ex.output), "attempts": tries})
    return {"task_id": task.id, "solved": score_task(result, task), "tests": tests}


def write_attempts(run_dir: Path, tasks: dict[str, ArcTask], outcomes: dict[str, TaskOutcome], entry: dict[str, Any],
                   filters: FilterConfig, vote_cfg: VoteConfig) -> dict[str, str]:
    """attempts/<task>.json for every task of one search (`entry`: its summary.json entry);
    returns each task's path relative to `run_dir`, for the report's links."""
    (run_dir / DIR).mkdir(exist_ok=True)
    written = {}
    for tid, task in tasks.items():
        path = f"{DIR}/{file_stem(tid)}.json"
        meta = {"iteration": entry["iteration"], "model_version": entry["model_version"]}
        body = task_attempts(task, outcomes[tid], filters, vote_cfg)
        # one line: indented, a 30x30 grid would be 900 lines (jq . attempts/<task>.json reads it)
        (run_dir / path).write_text(dumps({"task_id": body.pop("task_id"), **meta, **body}) + "\n")
        written[tid] = path
    return written
