"""SOAR on ARC: sample programs, execute them in the sandbox, refine, vote (and learn).

    python -m ray_jobs.soar --config configs/soar-demo.yaml
    python -m ray_jobs.soar --config configs/soar-demo.yaml search.samples_per_task=64
    ray job submit --working-dir . -- python -m ray_jobs.soar --config configs/soar-qwen.yaml

Writes runs/<experiment>/: config.yaml, metrics.jsonl (one row per task and iteration),
summary.json (an `iterations` list), report.md, curve.png and task renderings. Killed and
started again with the same experiment name, it resumes from Redis.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tqdm import tqdm

from common.config import dump_yaml, load_config, to_dict
from evolution.filters import FilterConfig
from evolution.hindsight import HindsightConfig
from evolution.search import SearchConfig
from evolution.voting import VoteConfig
from ray_jobs.soar_controls import (
    measure_version,
    random_prior_control,
    seed_corpus_kwargs,
    seed_only_control,
)
from ray_jobs.soar_learn import learn
from ray_jobs.soar_report import write_outputs
from search.pool import PoolConfig
from training.seed import SeedConfig

ARC_DSL = "evolution.dsl"  # importable inside the sandbox


@dataclass
class TaskSetConfig:
    split: str = "arc1-train"  # arc1-train | arc1-eval | arc2-train | arc2-eval | a Kaggle JSON file/dir
    ids: list[str] = field(default_factory=list)  # explicit task ids (empty: all that fit max_grid)
    # Held-out tasks of the same split: measured with every model and control, never searched
    # for hindsight data and kept out of the seed corpus, so gains there are generalisation.
    heldout_ids: list[str] = field(default_factory=list)
    max_grid: int | None = None  # keep tasks whose grids are at most this many cells per side
    limit: int | None = None  # first N tasks after the filters


@dataclass
class ModelConfig:
    checkpoint: str = ""  # a Hugging Face checkpoint dir; empty: build the seed model below
    seed: SeedConfig = field(default_factory=lambda: SeedConfig(
        preset="tiny", corpus="evolution.seed_corpus:seed_corpus", n=20000, max_steps=1500,
        learning_rate=2e-3, max_length=2048))


@dataclass
class VerifierConfig:
    actors: int = 1  # ArcVerifierPool actors (one CPU each per worker)
    workers_per_actor: int = 1  # warm sandbox workers per actor
    use_cache: bool = True  # the store's execution cache


@dataclass
class LearnConfig:
    from_base: bool = True  # each iteration fine-tunes the base model on all data so far (the paper); False: the previous one
    lora: bool = False  # LoRA adapters (merged into the saved checkpoint) instead of full fine-tuning
    max_steps: int = 200  # SFT steps per iteration
    learning_rate: float = 1e-3
    batch_size: int = 16
    max_length: int = 2048  # tokens per training sequence
    num_cpus: float = 1.0  # Ray CPUs reserved for the SFT task (the samplers idle meanwhile)
    # Fresh rows of model.seed's corpus mixed into every step's hindsight data (replay): a small
    # model fine-tuned on a few tasks' programs alone forgets what the seed corpus taught it.
    seed_rows: int = 0
    hindsight: HindsightConfig = field(default_factory=HindsightConfig)


@dataclass
class ControlsConfig:
    # Sampling seeds every measured sampler (model versions, controls) is searched with, on
    # demo and held-out tasks; the iteration's own search counts as the run of search.seed.
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    measure_models: bool = False  # every model version on every seed and split (the demo does)
    random_prior: bool = False  # also search with random DSL programs (no model), same budget
    seed_only: bool = False  # the seed model + the same extra SFT steps on seed-corpus rows only

    def __post_init__(self):
        if not self.seeds:
            raise ValueError("controls.seeds must name at least one sampling seed")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"controls.seeds {self.seeds} repeats a seed")


@dataclass
class SoarConfig:
    experiment: str = "soar"  # Redis namespace; the same name resumes
    runs_dir: str = "runs"
    storage_path: str = ""  # checkpoints and datasets; every node must read it (default: the run dir)
    iterations: int = 1  # searches; a learning step (hindsight SFT) runs between consecutive ones
    tasks: TaskSetConfig = field(default_factory=TaskSetConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    sampler: PoolConfig = field(default_factory=PoolConfig)
    verifier: VerifierConfig = field(default_factory=VerifierConfig)
    filters: FilterConfig = field(default_factory=FilterConfig)
    vote: VoteConfig = field(default_factory=VoteConfig)
    learn: LearnConfig = field(default_factory=LearnConfig)
    controls: ControlsConfig = field(default_factory=ControlsConfig)
    curve_budgets: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 6000])
    render_tasks: int = 6  # PNG renderings of this many tasks with their attempts


def load_tasks(ts: TaskSetConfig):
    """(search tasks, held-out tasks) by id."""
    from evolution.tasks import load_split, select

    split = load_split(ts.split)
    tasks = select(split, ids=ts.ids or None, max_grid=ts.max_grid, limit=ts.limit)
    if not tasks:
        raise ValueError(f"tasks: no task in {ts.split!r} matches ids/max_grid/limit")
    overlap = sorted(set(ts.heldout_ids) & set(tasks))
    if overlap:
        raise ValueError(f"tasks.heldout_ids {overlap} are also search tasks: held-out tasks must never be trained on")
    heldout = select(split, ids=ts.heldout_ids) if ts.heldout_ids else {}
    return tasks, heldout


def resolve_model(cfg: SoarConfig, store, task_ids: list[str]):
    """The current registry version; on a fresh experiment, the configured checkpoint or the seed."""
    from training.checkpoints import publish
    from training.seed import build_seed_model

    current = store.models(cfg.experiment).current()
    if current is not None:
        return current
    if cfg.model.checkpoint:
        return publish(store, cfg.experiment, cfg.model.checkpoint, parent=None, metrics={}, note="base")
    seed_cfg = replace(cfg.model.seed, corpus_kwargs=seed_corpus_kwargs(cfg, task_ids))
    print(f"building (or reusing) the {seed_cfg.preset} seed model ...", flush=True)
    seed = build_seed_model(seed_cfg)
    print(f"seed model {'reused' if seed.cached else 'built'}: {seed.path}", flush=True)
    return publish(store, cfg.experiment, seed.path, parent=None, metrics=seed.info["train"], note="seed")


async def search_iteration(cfg: SoarConfig, store, tasks, sampler_pool, verifier_pool, version, iteration: int) -> dict[str, Any]:
    """One search over all tasks with the current model: returns the iteration summary entry."""
    from evolution import metrics
    from evolution.backends import pool_sampler, pool_verifier
    from evolution.search import SoarSearch
    from verifiers.arc.examples import SOLUTIONS

    examples = {}
    if cfg.search.one_shot and cfg.search.prompt_style == "numpy":
        from evolution.tasks import load_split

        arc1 = load_split("arc1-train")
        examples = {tid: (arc1[tid], code) for tid, code in SOLUTIONS.items() if tid in arc1 and tid not in tasks}
    budget = len(tasks) * (cfg.search.samples_per_task + cfg.search.refinements_per_task)
    bar = tqdm(total=budget, desc=f"iteration {iteration} programs", unit="prog", dynamic_ncols=True)
    search = SoarSearch(cfg.search, sampler=pool_sampler(sampler_pool), verifier=pool_verifier(verifier_pool),
                        archive=store.archive(cfg.experiment), model_version=version.version, iteration=iteration,
                        filters=cfg.filters, vote_cfg=cfg.vote, examples=examples,
                        on_progress=lambda task_id, n: bar.update(n))
    busy_before = sum(s.busy_s for s in await sampler_pool.stats())
    started = time.time()
    outcomes = await search.run(tasks)
    wall = time.time() - started
    busy = sum(s.busy_s for s in await sampler_pool.stats()) - busy_before
    bar.close()

    rows = [metrics.task_row(tasks[t], outcomes[t], cfg.filters, cfg.vote) | {"iteration": iteration} for t in tasks]
    budgets = [b for b in cfg.curve_budgets if b <= cfg.search.samples_per_task + cfg.search.refinements_per_task]
    entry = {
        "iteration": iteration,
        "model_version": version.version,
        "tasks": len(tasks),
        "solved": sum(r["solved"] or 0.0 for r in rows),
        "oracle": sum(r["oracle"] or 0.0 for r in rows),
        "programs": sum(r["programs"] for r in rows),
        "executions": sum(r["executions"] for r in rows),
        "cache_hits": sum(r["cache_hits"] for r in rows),
        "hit_rate": metrics.hit_rate(outcomes),
        "sampler_busy_frac": busy / (wall * cfg.sampler.num_actors) if wall > 0 else 0.0,
        "wall_s": round(wall, 2),
        "curve": metrics.curve(tasks, outcomes, budgets or [1], cfg.filters, cfg.vote),
    }
    return {"entry": entry, "rows": rows, "outcomes": outcomes}


async def run_async(cfg: SoarConfig) -> dict[str, Any]:
    import ray

    from search.pool import SamplerPool
    from store import Store
    from verifiers.arc.pool import ArcVerifierPool

    run_dir = Path(cfg.runs_dir) / cfg.experiment
    run_dir.mkdir(parents=True, exist_ok=True)
    dump_yaml(cfg, run_dir / "config.yaml")
    store = Store.connect()
    store.experiments.create(cfg.experiment, "soar", to_dict(cfg), exist_ok=True)
    store.experiments.set_status(cfg.experiment, "running")
    tasks, heldout = load_tasks(cfg.tasks)
    resolve_model(cfg, store, sorted({*tasks, *heldout}))
    version = base = store.models(cfg.experiment).list()[0]  # iteration 0 always searches with the base
    print(f"{len(tasks)} tasks, {len(heldout)} held out; base model {base.version} = {base.checkpoint}", flush=True)

    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False, log_to_driver=False)
    cfg.sampler.experiment = cfg.experiment
    sampler_pool = SamplerPool(cfg.sampler, checkpoint=version.checkpoint, version=version.version)
    verifier_pool = ArcVerifierPool(actors=cfg.verifier.actors, workers_per_actor=cfg.verifier.workers_per_actor,
                                    allowed_modules=(ARC_DSL,), use_cache=cfg.verifier.use_cache)
    storage = Path(cfg.storage_path) if cfg.storage_path else run_dir
    results, baselines = [], {}
    try:
        await sampler_pool.ready()
        for it in range(cfg.iterations):
            timing: dict[str, float] = {}
            if it > 0:
                version, data_counts = await learn(cfg, store, tasks, base, version, it - 1, storage, tuple(heldout))
                timing |= {k: data_counts.pop(k) for k in ("dataset_s", "train_s") if k in data_counts}
                if sampler_pool.version != version.version:
                    started = time.time()
                    await sampler_pool.load(version.version)
                    timing["switch_s"] = round(time.time() - started, 2)
            result = await search_iteration(cfg, store, tasks, sampler_pool, verifier_pool, version, iteration=it)
            entry = result["entry"]
            timing["search_s"] = entry["wall_s"]
            if it > 0:
                entry["hindsight"] = data_counts
            if cfg.controls.measure_models:
                started = time.time()
                print(f"measuring {version.version} on seeds {cfg.controls.seeds}, demo and held-out tasks ...", flush=True)
                measured = await measure_version(cfg, store, tasks, heldout, sampler_pool, verifier_pool, version,
                                                 result["outcomes"])
                entry["search_hit_rate"] = entry["hit_rate"]  # this search's alone; hit_rate: mean over seeds
                entry |= measured
                timing["measure_s"] = round(time.time() - started, 2)
            entry["timing"] = timing
            results.append(result)
            summary = write_outputs(cfg, run_dir, tasks, results, baselines)  # after every search: nothing lost
        if cfg.controls.random_prior:
            print("control: the random-program prior ...", flush=True)
            baselines["random_prior"] = await random_prior_control(cfg, store, tasks, heldout, verifier_pool)
            summary = write_outputs(cfg, run_dir, tasks, results, baselines)
        if cfg.controls.seed_only and cfg.iterations < 2:
            print("controls.seed_only skipped: with one iteration there is no extra training to match", flush=True)
        elif cfg.controls.seed_only:
            baselines["seed_only_control"] = await seed_only_control(cfg, store, tasks, heldout, sampler_pool,
                                                                     verifier_pool, base, storage)
            summary = write_outputs(cfg, run_dir, tasks, results, baselines)
    except BaseException:
        store.experiments.set_status(cfg.experiment, "failed")
        raise
    finally:
        sampler_pool.shutdown()
        verifier_pool.close()
    store.experiments.set_status(cfg.experiment, "done")
    e = summary["iterations"][-1]
    print(f"iteration {e['iteration']}: solved {e['solved']:.2f}/{e['tasks']} (oracle {e['oracle']:.2f}), "
          f"{e['programs']} programs, hit rate {e['hit_rate']:.4f}, sampler busy {e['sampler_busy_frac']:.2f}, "
          f"{e['wall_s']}s -> {run_dir}/report.md", flush=True)
    return summary


def run(cfg: SoarConfig) -> dict[str, Any]:
    return asyncio.run(run_async(cfg))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ray_jobs.soar", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=None, help="YAML of overrides (configs/soar-demo.yaml)")
    parser.add_argument("--iterations", type=int, default=None, help="searches, with hindsight SFT between them")
    parser.add_argument("overrides", nargs="*", help="field=value overrides, e.g. search.samples_per_task=64")
    args = parser.parse_args(argv)
    overrides = args.overrides + ([f"iterations={args.iterations}"] if args.iterations is not None else [])
    run(load_config(args.config, SoarConfig, overrides))


if __name__ == "__main__":
    main()
