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
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from common.config import dump_yaml, load_config, to_dict
from evolution.filters import FilterConfig
from evolution.hindsight import HindsightConfig
from evolution.search import SearchConfig
from evolution.voting import VoteConfig
from search.pool import PoolConfig
from training.seed import SeedConfig

ARC_DSL = "evolution.dsl"  # importable inside the sandbox


@dataclass
class TaskSetConfig:
    split: str = "arc1-train"  # arc1-train | arc1-eval | arc2-train | arc2-eval | a Kaggle JSON file/dir
    ids: list[str] = field(default_factory=list)  # explicit task ids (empty: all that fit max_grid)
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
    hindsight: HindsightConfig = field(default_factory=HindsightConfig)


@dataclass
class ControlsConfig:
    random_prior: bool = False  # also search with random DSL programs (no model), same budget
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])  # sampling seeds per control

    def __post_init__(self):
        if not self.seeds:
            raise ValueError("controls.seeds must name at least one sampling seed")


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
    from evolution.tasks import load_split, select

    tasks = select(load_split(ts.split), ids=ts.ids or None, max_grid=ts.max_grid, limit=ts.limit)
    if not tasks:
        raise ValueError(f"tasks: no task in {ts.split!r} matches ids/max_grid/limit")
    return tasks


def resolve_model(cfg: SoarConfig, store, task_ids: list[str]):
    """The current registry version; on a fresh experiment, the configured checkpoint or the seed."""
    from training.checkpoints import publish
    from training.seed import build_seed_model

    current = store.models(cfg.experiment).current()
    if current is not None:
        return current
    if cfg.model.checkpoint:
        return publish(store, cfg.experiment, cfg.model.checkpoint, parent=None, metrics={}, note="base")
    seed_cfg = cfg.model.seed
    if seed_cfg.corpus.startswith("evolution.seed_corpus:"):
        # the evaluation tasks' inputs never enter the seed corpus
        seed_cfg.corpus_kwargs.setdefault("exclude_tasks", sorted(task_ids))
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


async def learn(cfg: SoarConfig, store, tasks, base, current, iteration: int, storage: Path):
    """Hindsight data from the archive -> SFT (a Ray task, GPU if any) -> a new current version.

    The version is published with the note "iteration N"; a restarted job finds it and
    skips the training it already did.
    """
    from datasets import Dataset

    from evolution.hindsight import build_rows
    from evolution.records import Candidate
    from training.checkpoints import publish
    from training.sft import SFTJobConfig, train_sft_remote

    note = f"iteration {iteration + 1}"
    done = next((m for m in store.models(cfg.experiment).list() if m.note == note), None)
    if done is not None:
        print(f"{note}: reusing {done.version} (trained before a restart)", flush=True)
        return done, {}
    archive = store.archive(cfg.experiment)
    cands = {tid: [Candidate.from_record(r) for r in archive.get_task(tid)] for tid in tasks}
    hcfg = cfg.learn.hindsight
    hcfg.prompt_style = cfg.search.prompt_style
    rows, counts = build_rows(tasks, cands, hcfg, iteration)
    if not rows:
        print(f"{note}: no hindsight data (no program ran cleanly); keeping {current.version}", flush=True)
        return current, counts | {"rows": 0}
    data_dir = storage / "data" / f"it{iteration}"
    Dataset.from_list([{"prompt": r["prompt"], "completion": r["completion"]} for r in rows]).save_to_disk(str(data_dir))
    start = base if cfg.learn.from_base else current
    sft = SFTJobConfig(
        model_path=start.checkpoint, output_dir=str((storage / "checkpoints" / f"it{iteration + 1}").resolve()),
        max_steps=cfg.learn.max_steps, learning_rate=cfg.learn.learning_rate,
        per_device_train_batch_size=cfg.learn.batch_size, max_length=cfg.learn.max_length, lora=cfg.learn.lora,
        disable_tqdm=True, quiet=True, seed=iteration,
    )
    print(f"{note}: SFT on {len(rows)} hindsight rows ({counts}) from {start.version} ...", flush=True)
    result = await train_sft_remote(sft, str(data_dir.resolve()))
    metrics = result.metrics | counts | {"rows": len(rows), "dataset": str(data_dir)}
    mv = publish(store, cfg.experiment, result.checkpoint, parent=current.version, metrics=metrics, note=note)
    store.events(cfg.experiment).emit("published", version=mv.version, iteration=iteration + 1)
    return mv, counts | {"rows": len(rows)}


async def random_prior_control(cfg: SoarConfig, store, tasks, verifier_pool) -> dict[str, Any]:
    """The random-program prior through the same search and budget, once per seed."""
    from dataclasses import replace

    from evolution import metrics
    from evolution.backends import pool_verifier
    from evolution.baselines import RANDOM_PRIOR, random_prior_sampler
    from evolution.search import SoarSearch

    if cfg.search.prompt_style != "compact":
        raise ValueError("controls.random_prior needs search.prompt_style=compact (the DSL programs' prompts)")
    solved, hit_rates = [], []
    for seed in cfg.controls.seeds:
        search = SoarSearch(replace(cfg.search, seed=seed), sampler=random_prior_sampler(tasks),
                            verifier=pool_verifier(verifier_pool),
                            archive=store.archive(f"{cfg.experiment}.random-prior.s{seed}"),
                            model_version=RANDOM_PRIOR, filters=cfg.filters, vote_cfg=cfg.vote)
        outcomes = await search.run(tasks)
        rows = [metrics.task_row(tasks[t], outcomes[t], cfg.filters, cfg.vote) for t in tasks]
        solved.append(sum(r["solved"] or 0.0 for r in rows))
        hit_rates.append(metrics.hit_rate(outcomes))
    return {"solved_seeds": solved, "hit_rate": sum(hit_rates) / len(hit_rates), "seeds": cfg.controls.seeds}


def write_outputs(cfg: SoarConfig, run_dir: Path, tasks, results: list[dict[str, Any]],
                  baselines: dict[str, Any] | None = None) -> dict[str, Any]:
    from evolution.report import plot_curve, plot_iterations, render_task

    entries = [r["entry"] for r in results]
    with open(run_dir / "metrics.jsonl", "w") as f:
        for r in results:
            for row in r["rows"]:
                f.write(json.dumps(row) + "\n")
    summary = {"experiment": cfg.experiment, "iterations": entries}
    if baselines:
        summary["baselines"] = baselines
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    plot_curve({f"it{e['iteration']} ({e['model_version']})": [(p["n"], p["solved"], p["oracle"]) for p in e["curve"]]
                for e in entries}, len(tasks), run_dir / "curve.png", f"{cfg.experiment}: solved vs programs tried")
    if len(entries) > 1:
        plot_iterations(entries, run_dir / "iterations.png")
    last = results[-1]
    shown = []
    for tid in list(tasks)[: cfg.render_tasks]:
        out = last["outcomes"][tid]
        solved = next(r["solved"] for r in last["rows"] if r["task_id"] == tid)
        render_task(tasks[tid], out.attempts, run_dir / f"task-{tid}.png", solved)
        shown.append(tid)
    lines = [f"# SOAR: {cfg.experiment}", "",
             "| iteration | model | tasks | solved (pass@2) | oracle | programs | hit rate | sampler busy | wall s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for e in entries:
        lines.append(f"| {e['iteration']} | {e['model_version']} | {e['tasks']} | {e['solved']:.2f} | {e['oracle']:.2f} | "
                     f"{e['programs']} | {e['hit_rate']:.4f} | {e['sampler_busy_frac']:.2f} | {e['wall_s']} |")
    if baselines and "random_prior" in baselines:
        prior = baselines["random_prior"]
        lines += ["", f"Random-program prior (no model, same budget), solved per seed {prior['seeds']}: "
                  f"{prior['solved_seeds']}, hit rate {prior['hit_rate']:.4f}."]
    lines += ["", "![solved vs programs](curve.png)", ""]
    if len(entries) > 1:
        lines += ["![iterations](iterations.png)", ""]
    lines += [f"![{t}](task-{t}.png)" for t in shown]
    lines += ["", "Config: [config.yaml](config.yaml) · per-task rows: [metrics.jsonl](metrics.jsonl) · "
              "numbers: [summary.json](summary.json)", ""]
    (run_dir / "report.md").write_text("\n".join(lines))
    return summary


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
    tasks = load_tasks(cfg.tasks)
    resolve_model(cfg, store, list(tasks))
    version = base = store.models(cfg.experiment).list()[0]  # iteration 0 always searches with the base
    print(f"{len(tasks)} tasks; base model {base.version} = {base.checkpoint}", flush=True)

    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False, log_to_driver=False)
    cfg.sampler.experiment = cfg.experiment
    sampler_pool = SamplerPool(cfg.sampler, checkpoint=version.checkpoint, version=version.version)
    verifier_pool = ArcVerifierPool(actors=cfg.verifier.actors, workers_per_actor=cfg.verifier.workers_per_actor,
                                    allowed_modules=(ARC_DSL,), use_cache=cfg.verifier.use_cache)
    storage = Path(cfg.storage_path) if cfg.storage_path else run_dir
    results = []
    try:
        await sampler_pool.ready()
        for it in range(cfg.iterations):
            if it > 0:
                version, data_counts = await learn(cfg, store, tasks, base, version, it - 1, storage)
                if sampler_pool.version != version.version:
                    await sampler_pool.load(version.version)
            result = await search_iteration(cfg, store, tasks, sampler_pool, verifier_pool, version, iteration=it)
            if it > 0:
                result["entry"]["hindsight"] = data_counts
            results.append(result)
            summary = write_outputs(cfg, run_dir, tasks, results)  # after every search: nothing lost
        if cfg.controls.random_prior:
            prior = await random_prior_control(cfg, store, tasks, verifier_pool)
            summary = write_outputs(cfg, run_dir, tasks, results, {"random_prior": prior})
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
