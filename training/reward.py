"""Reward-model training with TRL's RewardTrainer on (prompt,) chosen/rejected data.

    from training.reward import RewardJobConfig, train_reward
    result = train_reward(RewardJobConfig(model_path=..., output_dir=...), pairs)

Starts from any causal-LM checkpoint (the head is new, one label) and saves a
`*ForSequenceClassification` checkpoint, which verifiers.judges' reward_model judge loads.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from datasets import Dataset
from transformers import AutoModelForSequenceClassification, AutoTokenizer
from trl import RewardConfig, RewardTrainer

from training.common import (
    RatchetTrainFields,
    TrainResult,
    as_dataset,
    check_fields,
    save_trained,
    scratch_run,
    set_callbacks,
    set_threads,
    train_metrics,
)


@dataclass
class RewardJobConfig(RatchetTrainFields, RewardConfig):
    """TRL's RewardConfig plus ratchet's fields (and its changed defaults, see RatchetTrainFields)."""


def train_reward(cfg: RewardJobConfig, data: Dataset | list[dict[str, Any]] | str) -> TrainResult:
    """Train a scalar reward head (and the body) on chosen/rejected pairs; returns the checkpoint."""

    started = time.time()
    check_fields(cfg)
    dataset = as_dataset(data, ("chosen", "rejected"))
    set_threads(cfg)
    tokenizer = AutoTokenizer.from_pretrained(cfg.model_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    model = AutoModelForSequenceClassification.from_pretrained(cfg.model_path, num_labels=1, dtype=dtype)
    model.config.pad_token_id = tokenizer.pad_token_id
    with scratch_run(cfg) as run_cfg:
        trainer = RewardTrainer(model=model, args=run_cfg, train_dataset=dataset, processing_class=tokenizer)
        set_callbacks(trainer, cfg)
        output = trainer.train()
        metrics = train_metrics(output, trainer) | {"examples": len(dataset), "method": "reward"}
        return save_trained(trainer, tokenizer, cfg.output_dir, metrics, started)
