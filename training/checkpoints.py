"""Checkpoint checks and publishing: a bad path fails loudly, naming the path and the reason,
and nothing reaches the model registry before its checkpoint is whole."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from safetensors import safe_open

from store import ModelVersion, Store

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


class CheckpointError(ValueError):
    """A checkpoint directory is missing or unusable; the message names the path and why."""


def validate_checkpoint(path: str | os.PathLike[str], need_tokenizer: bool = True) -> Path:
    """Check a Hugging Face checkpoint directory without loading the weights into a model."""
    p = Path(path)
    if not p.exists():
        raise CheckpointError(f"checkpoint {p} does not exist")
    if not p.is_dir():
        raise CheckpointError(f"checkpoint {p} is not a directory (expected a Hugging Face checkpoint dir)")
    config = p / "config.json"
    if not config.exists():
        raise CheckpointError(f"checkpoint {p} has no config.json: not a Hugging Face checkpoint dir")
    try:
        json.loads(config.read_text())
    except ValueError as e:
        raise CheckpointError(f"checkpoint {p} is corrupt: config.json is not valid JSON ({e})") from e
    weights = [p / f for f in WEIGHT_FILES if (p / f).exists()]
    if not weights:
        raise CheckpointError(f"checkpoint {p} has no weights (looked for {', '.join(WEIGHT_FILES)})")
    for w in weights:
        if w.suffix == ".safetensors":
            _check_safetensors(w)
    if need_tokenizer and not any((p / f).exists() for f in TOKENIZER_FILES):
        raise CheckpointError(f"checkpoint {p} has no tokenizer (looked for {', '.join(TOKENIZER_FILES)})")
    return p


def _check_safetensors(path: Path) -> None:
    """Header and sizes agree with the file (catches truncated or overwritten weights)."""

    try:
        with safe_open(str(path), framework="pt") as f:
            names = list(f.keys())
            if names:
                f.get_slice(names[-1])  # the last tensor's bytes lie at the end of the file
    except Exception as e:  # safetensors raises its own error types for every kind of damage
        raise CheckpointError(f"checkpoint weights {path} are corrupt: {e}") from e


def finalize_checkpoint(tmp_dir: Path, final_dir: Path) -> Path:
    """Move a fully written checkpoint into place in one rename (no half-written final dir)."""
    validate_checkpoint(tmp_dir)
    if final_dir.exists():
        shutil.rmtree(final_dir)
    os.replace(tmp_dir, final_dir)
    return final_dir


def publish(
    store: Store,
    experiment: str,
    checkpoint: str | os.PathLike[str],
    parent: str | None,
    metrics: dict[str, Any],
    note: str = "",
) -> ModelVersion:
    """Validate the checkpoint, then register it as the experiment's new current version."""
    path = validate_checkpoint(checkpoint)
    return store.models(experiment).publish(str(path.resolve()), parent=parent, metrics=metrics, note=note)
