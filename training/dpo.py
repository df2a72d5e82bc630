"""Direct preference optimization with TRL's DPOTrainer on prompt/chosen/rejected data.

    from training.dpo import DPOJobConfig, train_dpo
    result = train_dpo(DPOJobConfig(model_path=..., output_dir=..., beta=0.1), pairs)

The reference model is the starting checkpoint (TRL makes the copy; with LoRA it is the
base with adapters disabled). `train_dpo_remote` runs it as a Ray task.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from datasets import Dataset
from trl import DPOConfig, DPOTrainer

from training.common import (
    RatchetTrainFields,
    TrainResult,
    as_dataset,
    check_fields,
    gpu_options,
    load_model,
    lora_config,
    quiet_down,
    save_trained,
    scratch_run,
    set_threads,
    train_metrics,
)

DPO_COLUMNS = ("prompt", "chosen", "rejected")


@dataclass
class DPOJobConfig(RatchetTrainFields, DPOConfig):
    """TRL's DPOConfig plus ratchet's fields (and its changed defaults, see RatchetTrainFields)."""


def train_dpo(
    cfg: DPOJobConfig, data: Dataset | list[dict[str, Any]] | str, callbacks: list | None = None
) -> TrainResult:
    """Preference-tune cfg.model_path on prompt/chosen/rejected pairs; returns the checkpoint."""
    started = time.time()
    check_fields(cfg)
    dataset = as_dataset(data, DPO_COLUMNS)
    set_threads(cfg)
    model, tokenizer = load_model(cfg.model_path)
    with scratch_run(cfg) as run_cfg:
        trainer = DPOTrainer(
            model=model, args=run_cfg, train_dataset=dataset, processing_class=tokenizer,
            peft_config=lora_config(cfg), callbacks=callbacks,
        )
        quiet_down(trainer, cfg)
        output = trainer.train()
        metrics = train_metrics(output, trainer) | {"examples": len(dataset), "method": "dpo", "beta": cfg.beta}
        return save_trained(trainer, tokenizer, cfg.output_dir, metrics, started)


def train_dpo_remote(cfg: DPOJobConfig, data: Dataset | list[dict[str, Any]] | str):
    """Submit train_dpo as a Ray task (GPU when the cluster has one); returns an ObjectRef."""
    import ray

    return ray.remote(train_dpo).options(**gpu_options()).remote(cfg, data)
