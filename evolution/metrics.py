"""SOAR metrics from search outcomes: per-task rows, the iteration summary, the curve."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evolution.driver import TaskOutcome
from evolution.filters import FilterConfig, keep_for_voting
from evolution.records import Candidate
from evolution.voting import VoteConfig, oracle, score_task, vote
from verifiers.arc.grids import ArcTask


def _seq(c: Candidate) -> int:
    return int(c.extra.get("seq", 0))


def task_row(task: ArcTask, out: TaskOutcome, filters: FilterConfig, vote_cfg: VoteConfig) -> dict[str, Any]:
    result = vote([c for c in out.candidates if keep_for_voting(c, task, filters)], task, vote_cfg)
    return {
        "task_id": task.id,
        "solved": score_task(result, task),
        "oracle": oracle(out.candidates, task),
        "programs": out.sampled + out.refined,
        "distinct": len(out.candidates),
        "no_code": out.no_code,
        "all_ok": sum(c.all_ok for c in out.candidates),
        "train_solved_programs": sum(bool(c.train_correct) and all(c.train_correct) for c in out.candidates),
        "fully_correct_programs": sum(c.fully_correct for c in out.candidates),
        "vote_groups": len(result.groups),
        "executions": out.executions,
        "cache_hits": out.cache_hits,
    }


def curve(tasks: dict[str, ArcTask], outcomes: dict[str, TaskOutcome], budgets: Sequence[int],
          filters: FilterConfig, vote_cfg: VoteConfig) -> list[dict[str, float]]:
    """Tasks solved (pass@2, oracle) if each task had stopped after n programs tried."""
    points = []
    for n in sorted(set(budgets)):
        solved = orc = 0.0
        for tid, task in tasks.items():
            seen = [c for c in outcomes[tid].candidates if _seq(c) < n]
            voters = [c for c in seen if keep_for_voting(c, task, filters)]
            solved += score_task(vote(voters, task, vote_cfg), task) or 0.0
            orc += oracle(seen, task) or 0.0
        points.append({"n": n, "solved": solved, "oracle": orc})
    return points


def hit_rate(outcomes: dict[str, TaskOutcome]) -> float:
    """Fraction of programs tried (completions drawn) that are fully correct, train and test:
    a model that learned a task's program and writes it again and again scores each time;
    completions with no program count as misses."""
    tried = sum(o.sampled + o.refined for o in outcomes.values())
    hits = sum(o.correct_samples for o in outcomes.values())
    return hits / tried if tried else 0.0
