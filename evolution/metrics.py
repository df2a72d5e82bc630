"""SOAR metrics from search outcomes: per-task rows, the iteration summary, the curve."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from common.fmt import num
from evolution import voting
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
    """Tasks solved (pass@2, oracle) if each task had stopped after n programs tried: the sum
    of `voting.curve` over the tasks whose test outputs are known."""
    solved = dict.fromkeys(budgets, 0.0)
    orc = dict.fromkeys(budgets, 0.0)
    for tid, task in tasks.items():
        if any(ex.output is None for ex in task.test):
            continue  # unknown answers score nothing
        points = voting.curve(outcomes[tid].candidates, task, budgets, cfg=vote_cfg, tried_at=_seq,
                              keep=lambda c, task=task: keep_for_voting(c, task, filters))
        for p in points:
            solved[p.n] += p.pass_at_2
            orc[p.n] += p.oracle
    return [{"n": n, "solved": solved[n], "oracle": orc[n]} for n in sorted(set(budgets))]


def scored(entry: dict[str, Any]) -> int:
    """Tasks of a search entry whose test outputs are known (an entry from before `scored`: all)."""
    return entry.get("scored", entry["tasks"])


def solved_text(entry: dict[str, Any], detail: str = "") -> str:
    """`solved 3/19` (+ `detail`), over the tasks that can be scored; the others are "not scored",
    never "solved 0": a task without test outputs was searched, but nothing says if it was solved."""
    n, tasks = scored(entry), entry["tasks"]
    if not n:
        return f"not scored ({tasks} task{'s' if tasks != 1 else ''} without test outputs)"
    rest = f", {tasks - n} not scored" if n < tasks else ""
    return f"solved {num(entry['solved'])}/{n}{detail}{rest}"


def hit_rate(outcomes: dict[str, TaskOutcome]) -> float:
    """Fraction of programs tried (completions drawn) that are fully correct, train and test:
    a model that learned a task's program and writes it again and again scores each time;
    completions with no program count as misses."""
    tried = sum(o.sampled + o.refined for o in outcomes.values())
    hits = sum(o.correct_samples for o in outcomes.values())
    return hits / tried if tried else 0.0


def prefix_cache_use(before: Sequence[Any], after: Sequence[Any]) -> dict[str, Any]:
    """The sampler engines' prefix-cache use between two SamplerPool.stats() readings:
    prompt tokens, those reused from the cache, hit rate, bytes held at the end. Empty when
    no engine has a prefix cache (vLLM keeps its own; the openai engine none)."""
    def totals(stats: Sequence[Any]) -> tuple[int, int, int]:
        caches = [s.engine.get("prefix_cache", {}) for s in stats]
        caches = [c for c in caches if c.get("enabled")]
        return (sum(c["prompt_tokens"] for c in caches), sum(c["reused_tokens"] for c in caches),
                sum(c["bytes"] for c in caches))

    if not any(s.engine.get("prefix_cache", {}).get("enabled") for s in after):
        return {}
    (p0, r0, _), (p1, r1, held) = totals(before), totals(after)
    prompt, reused = max(p1 - p0, 0), max(r1 - r0, 0)  # an actor replaced meanwhile restarts its counters
    return {"prompt_tokens": prompt, "reused_tokens": reused, "hit_rate": reused / prompt if prompt else 0.0,
            "bytes": held}
