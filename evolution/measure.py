"""Measure a program sampler the way the SOAR demo compares models: several sampling seeds,
on the demo tasks and on held-out tasks that never enter training.

Every measured search is the full SOAR search (samples, refinements, vote) with the same
budget; only the sampler changes (a model version, the random prior, a control model).
Each (split, seed) search archives into its own namespace, so it never feeds hindsight
data and a restarted job finds it done instead of searching again.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from common.progress import progress
from evolution import metrics
from evolution.driver import Sampler, SearchConfig, SoarSearch, TaskOutcome
from evolution.filters import FilterConfig
from evolution.voting import VoteConfig
from store.archive import CandidateArchive
from verifiers.arc.grids import ArcTask
from verifiers.arc.results import Verifier

SPLITS = ("demo", "heldout")


@dataclass
class Measurement:
    seeds: list[int]
    solved_seeds: list[float]  # demo tasks solved (pass@2), one per sampling seed
    heldout_solved_seeds: list[float]  # the same on held-out tasks (empty: there are none)
    hit_rate: float  # mean over seeds of the fraction of programs tried that are fully correct
    heldout_hit_rate: float | None
    hit_rate_seeds: list[float]
    heldout_hit_rate_seeds: list[float]

    def to_dict(self) -> dict[str, Any]:
        """Without the held-out fields when there are no held-out tasks: a report then has no
        held-out figures to show, rather than "held-out solved 0.0" over no tasks."""
        d = asdict(self)
        return d if self.heldout_solved_seeds else {k: v for k, v in d.items() if not k.startswith("heldout_")}


def solved(tasks: Mapping[str, ArcTask], outcomes: Mapping[str, TaskOutcome], filters: FilterConfig,
           vote_cfg: VoteConfig) -> float:
    return sum(metrics.task_row(tasks[t], outcomes[t], filters, vote_cfg)["solved"] or 0.0 for t in tasks)


async def measure(cfg: SearchConfig, *, sampler: Sampler | None, verifier: Verifier,
                  archive_for: Callable[[str], CandidateArchive], tasks: Mapping[str, ArcTask],
                  heldout: Mapping[str, ArcTask], seeds: Sequence[int], model_version: str,
                  filters: FilterConfig, vote_cfg: VoteConfig,
                  reuse: Mapping[int, Mapping[str, TaskOutcome]] | None = None,
                  on_search: Callable[[str, int, float, float], None] | None = None,
                  examples: Mapping[str, tuple[ArcTask, str]] | None = None,
                  fresh_sampler: Callable[[str, int], Sampler] | None = None) -> Measurement:
    """Search every split with every seed; `reuse[seed]` is a demo-task search already done
    with that seed (the iteration's own search), so it is not repeated. `fresh_sampler(split,
    seed)`, instead of `sampler`, gives each search its own (a model mix, whose bandit learns
    within one search); its `credit` method, when it has one, is paid what each batch earned."""
    reuse = reuse or {}
    if (sampler is None) == (fresh_sampler is None):
        raise ValueError("measure needs a sampler or a fresh_sampler, not both")
    results: dict[str, tuple[list[float], list[float]]] = {s: ([], []) for s in SPLITS}
    for split, split_tasks in (("demo", tasks), ("heldout", heldout)):
        if split == "heldout" and not split_tasks:
            continue  # no held-out tasks: no held-out figures (Measurement.to_dict leaves them out)
        for seed in seeds:
            if not split_tasks:
                outcomes: Mapping[str, TaskOutcome] = {}
            elif split == "demo" and seed in reuse:
                outcomes = reuse[seed]
            else:
                budget = len(split_tasks) * (cfg.samples_per_task + cfg.refinements_per_task)
                this = fresh_sampler(split, seed) if fresh_sampler else sampler
                with progress(total=budget, desc=f"measure {model_version} {split} seed {seed}", unit="prog") as bar:
                    search = SoarSearch(replace(cfg, seed=seed), sampler=this, verifier=verifier,
                                        archive=archive_for(f"{split}.s{seed}"), model_version=model_version,
                                        filters=filters, vote_cfg=vote_cfg, examples=dict(examples or {}),
                                        on_progress=lambda _, n: bar.update(n), on_scored=getattr(this, "credit", None))
                    outcomes = await search.run(dict(split_tasks))
            n_solved = solved(split_tasks, outcomes, filters, vote_cfg)
            hit = metrics.hit_rate(dict(outcomes))
            results[split][0].append(n_solved)
            results[split][1].append(hit)
            if on_search:
                on_search(split, seed, n_solved, hit)
    (demo_solved, demo_hits), (held_solved, held_hits) = results["demo"], results["heldout"]
    return Measurement(seeds=list(seeds), solved_seeds=demo_solved, heldout_solved_seeds=held_solved,
                       hit_rate=statistics.fmean(demo_hits),
                       heldout_hit_rate=statistics.fmean(held_hits) if held_hits else None,
                       hit_rate_seeds=demo_hits, heldout_hit_rate_seeds=held_hits)
