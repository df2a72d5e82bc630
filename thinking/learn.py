"""TPO's learning step: the judged pairs of an iteration -> TRL DPO as a Ray task -> a checkpoint.

`dpo_trainer` builds the `train` that TpoLoop calls once per arm and iteration; the loop
publishes what it returns. The training runs where Ray puts it (a GPU when the cluster has
one) and hands the weights back through Ray's object store when the samplers take them
from memory (sampler.weight_sync, decided by the pool: `cfg.sampler.sync_path`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common.tracking import training_args
from thinking.config import TpoConfig
from training.checkpoints import discard_unpublished


def dpo_loss(sft_weight: float) -> dict[str, Any]:
    """Plain DPO, or DPO plus sft_weight x NLL on the chosen response (TRL's combined loss types)."""
    return {"loss_type": ["sigmoid", "sft"], "loss_weights": [1.0, sft_weight]} if sft_weight else {}


def dpo_trainer(cfg: TpoConfig, storage: Path, models, run_dir: Path, seed_checkpoint: str):
    """TpoLoop's train(rows, start, arm, iteration) -> (checkpoint, metrics, weights or None)."""
    # imported here, not at the top: --help needs no torch or TRL
    from training.common import lora_args
    from training.dpo import DPOJobConfig, train_dpo_remote

    in_memory = cfg.sampler.sync_path == "memory"

    async def train(rows: list[dict[str, Any]], start, arm: str, iteration: int) -> tuple[str, dict[str, Any], Any]:
        t = cfg.train
        out = storage / "checkpoints" / f"{arm}-it{iteration + 1}"
        discard_unpublished(out, models.list())  # a run killed before publishing it; never a published one
        # a Ray task's stderr is no terminal: the trainer's numbers come as log lines, not a bar
        job = DPOJobConfig(model_path=start.checkpoint, output_dir=str(out.resolve()),
                           max_steps=t.max_steps, save_steps=t.save_steps, learning_rate=t.learning_rate,
                           beta=t.beta, **lora_args(t.lora, t, seed_checkpoint),
                           per_device_train_batch_size=t.batch_size, max_length=t.max_length,
                           disable_tqdm=True, logging_steps=max(1, t.max_steps // 5), seed=iteration,
                           completion_eos=not cfg.pairs.divergence_words,  # windows stop mid-thought
                           **dpo_loss(t.sft_weight),
                           **training_args(cfg.tracking, run_dir, out.name))
        weights = None
        if in_memory:
            result_ref, weights = train_dpo_remote(job, rows, num_cpus=t.num_cpus, weights=True)
            result = await result_ref
        else:
            result = await train_dpo_remote(job, rows, num_cpus=t.num_cpus)
        return result.checkpoint, result.metrics | {"rows": len(rows)}, weights
    return train
