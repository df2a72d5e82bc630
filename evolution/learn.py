"""SOAR's learning step: hindsight rows from the archive, then SFT -> a published version.

`train_and_publish` is the one sequence every training in the workload runs (the loop's
iterations and the seed-only control): rows -> dataset on disk -> SFT as a Ray task (GPU
when the cluster has one) -> publish in a model registry.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datasets import Dataset

from evolution.config import LearnConfig, SoarConfig
from evolution.hindsight import Examples, build_rows
from evolution.prompts import as_completion, as_prompt
from evolution.records import Candidate
from store import Store, keys
from store.models import ModelVersion
from training.checkpoints import discard_unpublished, publish
from training.common import lora_args
from training.corpora import load_corpus
from training.sft import SFTJobConfig, train_sft_remote
from verifiers.arc.grids import ArcTask

log = logging.getLogger(__name__)


@dataclass
class Trained:
    version: ModelVersion
    rows: int
    dataset_s: float
    train_s: float
    weights: Any = None  # with weights=True: an ObjectRef of the state dict (or of None); drop it after the switch


def seed_corpus_kwargs(cfg: SoarConfig, task_ids: list[str]) -> dict[str, Any]:
    """model.seed's corpus arguments; the DSL corpus never sees the demo or held-out tasks' inputs."""
    kwargs = dict(cfg.model.seed.corpus_kwargs)
    if cfg.model.seed.corpus.startswith("evolution.seed_corpus:"):
        kwargs.setdefault("exclude_tasks", sorted(task_ids))
    return kwargs


def seed_rows(cfg: SoarConfig, n: int, seed: int, task_ids: list[str]) -> list[dict[str, str]]:
    """`n` fresh rows of model.seed's corpus, drawn with `seed` (not the seed model's own 0), as
    chat messages when the prompts are (search.prompt_format chat): replay rows and the seed-only
    control's rows must be in the format of the hindsight rows they join."""
    s = cfg.model.seed
    rows = load_corpus(s.corpus, n, s.seed + seed, seed_corpus_kwargs(cfg, task_ids))
    chat = cfg.search.prompt_format == "chat"
    return [{"prompt": as_prompt(r["prompt"], chat), "completion": as_completion(r["completion"], chat)}
            for r in rows]


def hindsight_rows(cfg: SoarConfig, store: Store, tasks: dict[str, ArcTask], iteration: int,
                   examples: Examples | None = None) -> tuple[list[dict], dict[str, int]]:
    """Relabeled programs and refinement pairs from the archive, as prompt/completion rows.

    With `learn.hindsight.iterations: last`, the programs `iteration`'s search tried, found by
    its marks: a program an earlier iteration archived first counts when it is found again.
    """
    archive = store.archive(cfg.experiment)
    # sorted: the archive's order is a Redis hash's (it changes with the table's history), and a
    # resumed iteration must build the same rows
    cands = {tid: sorted((Candidate.from_record(r) for r in archive.get_task(tid)), key=lambda c: c.code_hash)
             for tid in tasks}
    if cfg.learn.hindsight.iterations == "last":
        for tid in tasks:
            seen = archive.marks(keys.search_counter(iteration, "seen", tid))
            cands[tid] = [c for c in cands[tid] if c.code_hash in seen]
    rows, counts = build_rows(tasks, cands, cfg.learn.hindsight, iteration, style=cfg.search.prompt_style,
                              max_prompt_chars=cfg.search.max_prompt_chars, filters=cfg.filters,
                              chat=cfg.search.prompt_format == "chat", examples=examples)
    return [{"prompt": r["prompt"], "completion": r["completion"]} for r in rows], counts


async def train_and_publish(learn: LearnConfig, store: Store, *, registry: str, rows: list[dict[str, str]],
                            start: ModelVersion, storage: Path, data_name: str, name: str, steps: int,
                            seed: int, note: str, parent: str | None, metrics: dict[str, Any],
                            train_args: dict[str, Any] | None = None, base_checkpoint: str = "",
                            weights: bool = False) -> Trained:
    """rows -> `storage/data/<data_name>` -> SFT from `start` for `steps` ->
    `storage/checkpoints/<name>` -> published in `registry` with `note` (how a restarted job
    finds it again). `train_args`: more SFTJobConfig fields (report_to: common.tracking).
    `weights`: the task also hands back the trained state dict through Ray's object store
    (Trained.weights, for SamplerPool.switch)."""
    started = time.time()
    final = storage / "checkpoints" / name
    discard_unpublished(final, store.models(registry).list())  # a killed run's, never a published one
    data_dir = storage / "data" / data_name
    Dataset.from_list(rows).save_to_disk(str(data_dir))
    dataset_s = round(time.time() - started, 2)
    sft = SFTJobConfig(
        model_path=start.checkpoint, output_dir=str(final.resolve()), max_steps=steps,
        learning_rate=learn.learning_rate, **learn.batch_args(), max_length=learn.max_length, seed=seed, save_steps=learn.save_steps,
        **lora_args(learn.lora, learn, base_checkpoint or start.checkpoint),
        # a Ray task's stderr is no terminal: the trainer's numbers come as log lines, not a bar
        disable_tqdm=True, logging_steps=max(1, steps // 5), **(train_args or {}),
    )
    log.info("%s: SFT from %s, %d steps on %d rows", note, start.version, steps, len(rows))
    started = time.time()
    weights_ref = None
    if weights:
        result_ref, weights_ref = train_sft_remote(sft, str(data_dir.resolve()), learn.num_cpus, weights=True)
        result = await result_ref
    else:
        result = await train_sft_remote(sft, str(data_dir.resolve()), learn.num_cpus)
    train_s = round(time.time() - started, 2)
    version = publish(store, registry, result.checkpoint, parent=parent,
                      metrics=result.metrics | {"rows": len(rows), "dataset": str(data_dir)} | metrics, note=note)
    return Trained(version, len(rows), dataset_s, train_s, weights_ref)


def find_published(store: Store, registry: str, note: str) -> ModelVersion | None:
    """A version a run published before a restart (so its training is not done twice)."""
    return next((m for m in store.models(registry).list() if m.note == note), None)
