"""What a SOAR iteration's model is measured against, all with the same search and budget.

- every model version (the seed model is iteration 0): several sampling seeds, demo and
  held-out tasks (`evolution.measure`);
- the random-program prior that built the seed corpus (no model at all);
- the seed-only control: the seed model trained for the same extra SFT steps on fresh seed
  corpus rows, no hindsight data, so the gain of hindsight is separated from more training.

Every search archives in its own namespace and the control model is published in its own
registry, so a restarted job reuses what it finished.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from common.fmt import num
from evolution.baselines import RANDOM_PRIOR, random_prior_sampler
from evolution.config import SoarConfig
from evolution.driver import Sampler, TaskOutcome
from evolution.learn import seed_rows, train_and_publish
from evolution.measure import measure
from store import Store
from store.models import ModelVersion
from verifiers.arc.grids import ArcTask
from verifiers.arc.results import Verifier

SEED_ONLY_NOTE = "seed-only control"
log = logging.getLogger(__name__)


async def measure_sampler(cfg: SoarConfig, store: Store, tasks: Mapping[str, ArcTask],
                          heldout: Mapping[str, ArcTask], sampler: Sampler | None, verifier: Verifier, *,
                          namespace: str, model_version: str, label: str,
                          reuse: Mapping[int, Mapping[str, TaskOutcome]] | None = None,
                          examples: Mapping[str, tuple[ArcTask, str]] | None = None,
                          fresh_sampler: Callable[[str, int], Sampler] | None = None) -> dict[str, Any]:
    """One sampler (or a fresh one per search: evolution.measure) on every seed of
    controls.seeds, on the demo and the held-out tasks."""
    def on_search(split: str, seed: int, solved: float, hit: float) -> None:
        log.debug("%s: %s tasks, seed %d: solved %s, hit rate %s", label, split, seed, num(solved), num(hit))

    m = await measure(cfg.search, sampler=sampler, verifier=verifier,
                      archive_for=lambda split_seed: store.archive(f"{namespace}.{split_seed}"),
                      tasks=tasks, heldout=heldout, seeds=cfg.controls.seeds, model_version=model_version,
                      filters=cfg.filters, vote_cfg=cfg.vote, reuse=reuse, on_search=on_search, examples=examples,
                      fresh_sampler=fresh_sampler)
    return m.to_dict()


async def random_prior_control(cfg: SoarConfig, store: Store, tasks: Mapping[str, ArcTask],
                               heldout: Mapping[str, ArcTask], verifier: Verifier) -> dict[str, Any]:
    """The random DSL programs the seed corpus was built from, through the same search."""
    if cfg.search.prompt_style != "compact":
        raise ValueError("controls.random_prior needs search.prompt_style=compact (the DSL programs' prompts)")
    return await measure_sampler(cfg, store, tasks, heldout, random_prior_sampler({**tasks, **heldout}), verifier,
                                 namespace=f"{cfg.experiment}.random-prior", model_version=RANDOM_PRIOR,
                                 label="random prior")


def extra_steps(cfg: SoarConfig) -> int:
    """SFT steps the last iteration's model has on top of the seed model."""
    trainings = cfg.iterations - 1
    return cfg.learn.max_steps * (1 if cfg.learn.from_base else trainings)


async def seed_only_model(cfg: SoarConfig, store: Store, base: ModelVersion, storage: Path,
                          task_ids: list[str]) -> ModelVersion:
    """The base model + `extra_steps` SFT steps on fresh rows of model.seed's corpus (the seed
    model's own data), in its own registry so the experiment's `current` never points at it;
    reused when a restarted job built it already."""
    registry = f"{cfg.experiment}.seed-only"
    done = store.models(registry).current()
    if done is not None:
        return done
    steps = extra_steps(cfg)
    rows = seed_rows(cfg, steps * cfg.learn.batch_size, 1, task_ids)  # as many rows as the steps consume
    trained = await train_and_publish(cfg.learn, store, registry=registry, rows=rows, start=base, storage=storage,
                                      data_name="seed-only", name="seed-only", steps=steps, seed=0,
                                      note=SEED_ONLY_NOTE, parent=None,
                                      metrics={"from": f"{cfg.experiment}/{base.version}"})
    return trained.version
