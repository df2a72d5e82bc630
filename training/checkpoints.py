"""Checkpoint checks and publishing: a bad path fails loudly, naming the path and the reason,
and nothing reaches the model registry before its checkpoint is whole.

A finished checkpoint gets a manifest (`ratchet_manifest.json`: sha256 per file), is
fsynced, then renamed into place; a directory that already exists is never replaced (a
published checkpoint stays what its registry entry says). Publishing records the hashes in
the registry, and samplers check them before loading (store.models.verify_files).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from safetensors import safe_open

from store import ModelVersion, Store
from store.models import file_hashes, verify_files

log = logging.getLogger(__name__)
MANIFEST = "ratchet_manifest.json"
# scratch dirs beside a checkpoint (training/common.py): `.<name>.work-<hex>`, `.<name>.tmp-<hex>`; a
# resumable training's `.<name>.work` (no suffix) is kept: a rerun resumes from it
SCRATCH = re.compile(r"^\..+\.(work|tmp)-[0-9a-f]{8}$")

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


class CheckpointError(ValueError):
    """A checkpoint directory is missing or unusable; the message names the path and why."""


class CheckpointExists(CheckpointError):
    """The final directory already exists: a published checkpoint is never replaced."""


SEED_INFO = "ratchet_seed.json"  # written by training.seed: the model learnt plain text, not chat turns


def is_seed_model(path: str | os.PathLike[str]) -> bool:
    """One of ratchet's seed models (training.seed), which train fully; pretrained ones take LoRA."""
    return (Path(path) / SEED_INFO).exists()


def is_chat_model(path: str | os.PathLike[str]) -> bool:
    """Whether a checkpoint is prompted as a chat model: it ships a chat template and is not one of
    ratchet's seed models (their minimal template only serves `ratchet serve`; they learnt plain text)."""
    p = Path(path)
    if (p / SEED_INFO).exists():
        return False
    if (p / "chat_template.jinja").exists():
        return True
    config = p / "tokenizer_config.json"
    return config.exists() and bool(json.loads(config.read_text()).get("chat_template"))


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


def write_manifest(path: Path) -> dict[str, str]:
    """Hash every file of the checkpoint into its manifest; returns the hashes."""
    files = file_hashes(path)
    files.pop(MANIFEST, None)
    (path / MANIFEST).write_text(json.dumps({"algorithm": "sha256", "files": files}, indent=1, sort_keys=True))
    return files


def read_manifest(path: Path) -> dict[str, str] | None:
    manifest = path / MANIFEST
    if not manifest.exists():
        return None
    try:
        return dict(json.loads(manifest.read_text())["files"])
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"checkpoint {path} has a corrupt {MANIFEST}: {e}") from e


def fsync_tree(path: Path) -> None:
    """Flush every file and directory under `path` (and `path`) to disk."""
    for p in sorted(path.rglob("*"), key=lambda q: len(q.parts), reverse=True):
        _fsync(p)
    _fsync(path)


def _fsync(p: Path) -> None:
    fd = os.open(p, os.O_RDONLY | (os.O_DIRECTORY if p.is_dir() else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def finalize_checkpoint(tmp_dir: Path, final_dir: Path) -> Path:
    """Move a fully written checkpoint into place in one rename (no half-written final dir):
    validated, hashed into its manifest and fsynced first; never over an existing directory."""
    tmp_dir, final_dir = Path(tmp_dir), Path(final_dir)
    validate_checkpoint(tmp_dir)
    if final_dir.exists():
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise CheckpointExists(
            f"checkpoint {final_dir} already exists; a checkpoint is never replaced once written (its "
            "registry entry would then point at other weights). Write to a new directory: put the "
            "experiment name in the path, or a new version name."
        )
    write_manifest(tmp_dir)
    fsync_tree(tmp_dir)
    os.rename(tmp_dir, final_dir)  # the lease keeps a second writer of this experiment away
    _fsync(final_dir.parent)  # the rename itself survives a power cut
    return final_dir


def clean_scratch(directory: Path) -> list[Path]:
    """Remove the scratch dirs a killed training left in `directory`; returns what it removed.

    Only for a directory that one driver owns (an experiment's storage, under its lease)."""
    removed = []
    if Path(directory).is_dir():
        for p in Path(directory).iterdir():
            if p.is_dir() and SCRATCH.match(p.name):
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
    if removed:
        log.info("removed %d scratch dir(s) of killed trainings in %s", len(removed), directory)
    return removed


def discard_unpublished(final_dir: Path, published: Iterable[ModelVersion]) -> bool:
    """Remove `final_dir` when no registered version points at it: a run killed between
    writing a checkpoint and publishing it left it behind. Refuses to touch a published one."""
    final_dir = Path(final_dir)
    if not final_dir.exists():
        return False
    target = final_dir.resolve()
    owner = next((m for m in published if Path(m.checkpoint).resolve() == target), None)
    if owner is not None:
        raise CheckpointExists(f"checkpoint {final_dir} is published as {owner.version}; it is never replaced")
    log.warning("removing %s: written by a run killed before it published it", final_dir)
    shutil.rmtree(final_dir)
    return True


def publish(
    store: Store,
    experiment: str,
    checkpoint: str | os.PathLike[str],
    parent: str | None,
    metrics: dict[str, Any],
    note: str = "",
) -> ModelVersion:
    """Validate the checkpoint, then register it, with its file hashes, as the experiment's new
    current version. A checkpoint with a manifest must still match it; one without (a base
    model given by the user) is hashed now."""
    path = validate_checkpoint(checkpoint)
    files = read_manifest(path)
    if files is None:
        files = file_hashes(path)
    else:
        verify_files(path, files)
    return store.models(experiment).publish(str(path.resolve()), parent=parent, metrics=metrics, note=note,
                                            files=files)
