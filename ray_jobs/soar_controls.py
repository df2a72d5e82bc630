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

from pathlib import Path
from typing import Any

from tqdm import tqdm

SEED_ONLY_NOTE = "seed-only control"


def _report(label: str):
    def on_search(split: str, seed: int, solved: float, hit: float) -> None:
        tqdm.write(f"  {label}: {split} tasks, seed {seed}: solved {solved:g}, hit rate {hit:.4f}")
    return on_search


async def measure_sampler(cfg, store, tasks, heldout, sampler, verifier_pool, *, namespace: str, model_version: str,
                          label: str, reuse=None) -> dict[str, Any]:
    from evolution.backends import pool_verifier
    from evolution.measure import measure

    m = await measure(cfg.search, sampler=sampler, verifier=pool_verifier(verifier_pool),
                      archive_for=lambda split_seed: store.archive(f"{namespace}.{split_seed}"),
                      tasks=tasks, heldout=heldout, seeds=cfg.controls.seeds, model_version=model_version,
                      filters=cfg.filters, vote_cfg=cfg.vote, reuse=reuse, on_search=_report(label))
    return m.to_dict()


async def measure_version(cfg, store, tasks, heldout, sampler_pool, verifier_pool, version, main_outcomes):
    """The current sampler model on every seed and split; the iteration's own search counts
    as the demo run of its seed."""
    from evolution.backends import pool_sampler

    return await measure_sampler(cfg, store, tasks, heldout, pool_sampler(sampler_pool), verifier_pool,
                                 namespace=f"{cfg.experiment}.eval.{version.version}", model_version=version.version,
                                 label=f"model {version.version}", reuse={cfg.search.seed: main_outcomes})


async def random_prior_control(cfg, store, tasks, heldout, verifier_pool) -> dict[str, Any]:
    from evolution.baselines import RANDOM_PRIOR, random_prior_sampler

    if cfg.search.prompt_style != "compact":
        raise ValueError("controls.random_prior needs search.prompt_style=compact (the DSL programs' prompts)")
    sampler = random_prior_sampler({**tasks, **heldout})
    return await measure_sampler(cfg, store, tasks, heldout, sampler, verifier_pool,
                                 namespace=f"{cfg.experiment}.random-prior", model_version=RANDOM_PRIOR,
                                 label="random prior")


def seed_corpus_kwargs(cfg, task_ids: list[str]) -> dict[str, Any]:
    """model.seed's corpus arguments; the DSL corpus never sees the demo or held-out tasks' inputs."""
    kwargs = dict(cfg.model.seed.corpus_kwargs)
    if cfg.model.seed.corpus.startswith("evolution.seed_corpus:"):
        kwargs.setdefault("exclude_tasks", sorted(task_ids))
    return kwargs


def extra_steps(cfg) -> int:
    """SFT steps the last iteration's model has on top of the seed model."""
    trainings = cfg.iterations - 1
    return cfg.learn.max_steps * (1 if cfg.learn.from_base else trainings)


async def seed_only_checkpoint(cfg, store, base, storage: Path, task_ids: list[str]):
    """The base model + `extra_steps` SFT steps on fresh rows of model.seed's corpus (the seed
    model's own data; with model.checkpoint, the corpus configured there), reused when built."""
    from datasets import Dataset

    from ray_jobs.soar_learn import sft_config
    from training.checkpoints import publish
    from training.corpora import load_corpus
    from training.sft import train_sft_remote

    registry = store.models(f"{cfg.experiment}.seed-only")
    done = registry.current()
    if done is not None:
        return done
    seed = cfg.model.seed
    steps = extra_steps(cfg)
    # fresh rows from the same generator (another seed), as many as the steps consume
    rows = load_corpus(seed.corpus, steps * cfg.learn.batch_size, seed.seed + 1, seed_corpus_kwargs(cfg, task_ids))
    data_dir = storage / "data" / "seed-only"
    Dataset.from_list([{"prompt": r["prompt"], "completion": r["completion"]} for r in rows]).save_to_disk(str(data_dir))
    sft = sft_config(cfg, base.checkpoint, storage / "checkpoints" / "seed-only", steps=steps, seed=0)
    print(f"{SEED_ONLY_NOTE}: SFT from {base.version}, {steps} steps on {len(rows)} seed-corpus rows ...", flush=True)
    result = await train_sft_remote(sft, str(data_dir.resolve()), cfg.learn.num_cpus)
    # its own registry (so `current` of the experiment never points at it); the parent it
    # was trained from is the experiment's base, recorded in the metrics
    return publish(store, f"{cfg.experiment}.seed-only", result.checkpoint, parent=None,
                   metrics=result.metrics | {"rows": len(rows), "from": f"{cfg.experiment}/{base.version}"},
                   note=SEED_ONLY_NOTE)


async def seed_only_control(cfg, store, tasks, heldout, sampler_pool, verifier_pool, base, storage: Path):
    from evolution.backends import pool_sampler

    control = await seed_only_checkpoint(cfg, store, base, storage, sorted({*tasks, *heldout}))
    await sampler_pool.load_checkpoint(control.checkpoint, f"seed-only-{control.version}")
    m = await measure_sampler(cfg, store, tasks, heldout, pool_sampler(sampler_pool), verifier_pool,
                              namespace=f"{cfg.experiment}.seed-only", model_version=f"seed-only-{control.version}",
                              label=SEED_ONLY_NOTE)
    return m | {"steps": extra_steps(cfg), "checkpoint": control.checkpoint}
