"""LoRA adapters as models: a PEFT adapter dir, merged into its base once, used as a checkpoint.

    is_adapter("models/smollm2-verifier-lora")        # True: it has adapter_config.json
    merged_checkpoint("models/smollm2-verifier-lora") # $RATCHET_HOME/merged/<name>-<address>/

An embedded adapter ships megabytes (the adapter's weights) where a merged checkpoint would ship
the whole model. Every engine loads plain Hugging Face checkpoints (the samplers swap weights by
the same path), so a config naming an adapter gets the base with the adapter merged in, written
once under $RATCHET_HOME/merged/ and addressed by the adapter's files and its base: a changed
adapter is a new directory, never an overwritten one. The adapter's `base_model_name_or_path`
names its base as a config does (`pretrained:<name>` or a checkpoint dir).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
import uuid
from pathlib import Path

from store.server import ratchet_home
from training import embedded, pretrained

log = logging.getLogger(__name__)

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
DONE = "ratchet_merged.json"  # provenance, written last: its presence marks a complete merge


def checkpoint_of(spec: str) -> str:
    """A config's model as a checkpoint dir: `pretrained:<name>` fetched and converted once, an
    embedded model checked against its manifest, an adapter merged into its base once."""
    path = embedded.verified(pretrained.resolve_checkpoint(spec))
    return merged_checkpoint(path) if is_adapter(path) else path


def is_adapter(path: str | Path) -> bool:
    return (Path(path) / ADAPTER_CONFIG).exists()


def base_of(adapter: str | Path) -> str:
    """The adapter's base as a config names it (`pretrained:<name>` or a checkpoint dir)."""
    base = json.loads((Path(adapter) / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    if not base:
        raise ValueError(f"{adapter}/{ADAPTER_CONFIG} names no base_model_name_or_path: no base to merge into")
    return base


def address(adapter: str | Path, base_checkpoint: str) -> str:
    """The merged checkpoint's content address: the adapter's two files and the base's dir name."""
    h = hashlib.sha256(Path(base_checkpoint).resolve().name.encode())
    for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
        h.update(hashlib.sha256((Path(adapter) / name).read_bytes()).digest())
    return h.hexdigest()[:16]


def merged_checkpoint(adapter: str | Path, home: Path | None = None) -> str:
    """The base with `adapter` merged in, as a checkpoint dir (merged and saved on first use)."""
    adapter = Path(adapter)
    if not (adapter / ADAPTER_WEIGHTS).exists():
        raise FileNotFoundError(f"{adapter} has no {ADAPTER_WEIGHTS}: not a complete PEFT adapter")
    base = pretrained.resolve_checkpoint(base_of(adapter))
    target = (home or ratchet_home()) / "merged" / f"{adapter.resolve().name}-{address(adapter, base)}"
    if (target / DONE).exists():
        return str(target)
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.time()
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    staging = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex[:8]}")
    model.save_pretrained(staging)
    AutoTokenizer.from_pretrained(base).save_pretrained(staging)
    info = {"adapter": str(adapter), "base": base, "merge_s": round(time.time() - started, 2)}
    (staging / DONE).write_text(json.dumps(info, indent=2) + "\n")
    shutil.rmtree(target, ignore_errors=True)  # a half-written dir from a killed merge (no DONE)
    staging.rename(target)
    log.info("adapter %s merged into %s in %.1f s: %s", adapter, base, info["merge_s"], target)
    return str(target)
