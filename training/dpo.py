"""Direct preference optimization with TRL's DPOTrainer on prompt/chosen/rejected data.

    from training.dpo import DPOJobConfig, train_dpo
    result = train_dpo(DPOJobConfig(model_path=..., output_dir=..., beta=0.1), pairs)

The reference model is the starting checkpoint (TRL makes the copy; with LoRA it is the
base with adapters disabled). `train_dpo_remote` runs it as a Ray task.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from datasets import Dataset
from trl import DPOConfig, DPOTrainer

from training.common import RatchetTrainFields, TrainResult, run_trainer, train_remote

DPO_COLUMNS = ("prompt", "chosen", "rejected")


@dataclass
class DPOJobConfig(RatchetTrainFields, DPOConfig):
    """TRL's DPOConfig plus ratchet's fields (and its changed defaults, see RatchetTrainFields)."""

    completion_eos: bool = field(default=True, metadata={
        "help": "End chosen and rejected with EOS, as TRL does for plain-text rows; False for completions "
                "cut mid-text (pairs at their divergence), which must not teach the model to stop there."})


class _NoEosDPOTrainer(DPOTrainer):
    """DPOTrainer that takes off the EOS TRL appends to every plain-text completion."""

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        prepared = super()._prepare_dataset(dataset, processing_class, args, dataset_name)
        eos = self._tokenizer.eos_token_id

        def strip(row: dict[str, Any]) -> dict[str, Any]:
            return {k: row[k][:-1] if row[k] and row[k][-1] == eos else row[k] for k in ("chosen_ids", "rejected_ids")}

        return prepared.map(strip)


def train_dpo(
    cfg: DPOJobConfig, data: Dataset | list[dict[str, Any]] | str, callbacks: list | None = None
) -> TrainResult:
    """Preference-tune cfg.model_path on prompt/chosen/rejected pairs; returns the checkpoint."""
    trainer = DPOTrainer if cfg.completion_eos else _NoEosDPOTrainer
    return run_trainer(trainer, cfg, data, DPO_COLUMNS, callbacks, {"method": "dpo", "beta": cfg.beta})


def train_dpo_remote(cfg: DPOJobConfig, data: Dataset | list[dict[str, Any]] | str, num_cpus: float = 1.0, *,
                     weights: bool = False):
    """Submit train_dpo as a Ray task (GPU when the cluster has one); returns an ObjectRef, or
    with `weights` (result ref, weights ref): training.common.train_remote. `num_cpus` is what
    Ray reserves (TpoConfig.train.num_cpus); the trainer uses cfg.cpu_threads."""
    return train_remote(train_dpo, cfg, data, num_cpus, weights=weights)
