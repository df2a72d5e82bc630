"""SOAR's learning step: hindsight data from the archive -> SFT -> a new model version."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ray_jobs.soar import SoarConfig


def sft_config(cfg: SoarConfig, model_path: str, output_dir: Path, steps: int, seed: int):
    """The SFT job every learning step (and the seed-only control) runs: cfg.learn's fields."""
    from training.sft import SFTJobConfig

    return SFTJobConfig(
        model_path=model_path, output_dir=str(output_dir.resolve()), max_steps=steps,
        learning_rate=cfg.learn.learning_rate, per_device_train_batch_size=cfg.learn.batch_size,
        max_length=cfg.learn.max_length, lora=cfg.learn.lora, disable_tqdm=True, quiet=True, seed=seed,
    )


async def learn(cfg: SoarConfig, store, tasks, base, current, iteration: int, storage: Path,
                heldout_ids: tuple[str, ...] = ()):
    """Hindsight data from the archive -> SFT (a Ray task, GPU if any) -> a new current version.

    The version is published with the note "iteration N"; a restarted job finds it and
    skips the training it already did.
    """
    from datasets import Dataset

    from evolution.hindsight import build_rows
    from evolution.records import Candidate
    from training.checkpoints import publish
    from training.sft import train_sft_remote

    note = f"iteration {iteration + 1}"
    done = next((m for m in store.models(cfg.experiment).list() if m.note == note), None)
    if done is not None:
        print(f"{note}: reusing {done.version} (trained before a restart)", flush=True)
        return done, {}
    archive = store.archive(cfg.experiment)
    cands = {tid: [Candidate.from_record(r) for r in archive.get_task(tid)] for tid in tasks}
    hcfg = cfg.learn.hindsight
    hcfg.prompt_style, hcfg.max_prompt_chars = cfg.search.prompt_style, cfg.search.max_prompt_chars
    started = time.time()
    rows, counts = build_rows(tasks, cands, hcfg, iteration)
    if not rows:
        print(f"{note}: no hindsight data (no program ran cleanly); keeping {current.version}", flush=True)
        return current, counts | {"rows": 0}
    data = [{"prompt": r["prompt"], "completion": r["completion"]} for r in rows]
    if cfg.learn.seed_rows:
        from ray_jobs.soar_controls import seed_corpus_kwargs
        from training.corpora import load_corpus

        seed = cfg.model.seed  # a seed distinct from the seed model's corpus and the control's
        data += load_corpus(seed.corpus, cfg.learn.seed_rows, seed.seed + 2 + iteration,
                            seed_corpus_kwargs(cfg, sorted({*tasks, *heldout_ids})))
        counts = counts | {"seed_rows": cfg.learn.seed_rows}
    data_dir = storage / "data" / f"it{iteration}"
    Dataset.from_list(data).save_to_disk(str(data_dir))
    dataset_s = round(time.time() - started, 2)
    start = base if cfg.learn.from_base else current
    sft = sft_config(cfg, start.checkpoint, storage / "checkpoints" / f"it{iteration + 1}", cfg.learn.max_steps, iteration)
    print(f"{note}: SFT on {len(rows)} hindsight rows + {cfg.learn.seed_rows} seed rows ({counts}) "
          f"from {start.version} ...", flush=True)
    started = time.time()
    result = await train_sft_remote(sft, str(data_dir.resolve()), cfg.learn.num_cpus)
    train_s = round(time.time() - started, 2)
    metrics = result.metrics | counts | {"rows": len(rows), "dataset": str(data_dir)}
    mv = publish(store, cfg.experiment, result.checkpoint, parent=current.version, metrics=metrics, note=note)
    store.events(cfg.experiment).emit("published", version=mv.version, iteration=iteration + 1)
    return mv, counts | {"rows": len(rows), "dataset_s": dataset_s, "train_s": train_s}
