"""The engine protocol: what the sampler pool and the HTTP endpoint rely on."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from common.sampling import Completion, Prompt, SamplingParams


@runtime_checkable
class Engine(Protocol):
    version: str | None  # model version the next completions will be tagged with
    context_length: int | None  # the model's maximum context (prompt + completion tokens)

    def load(self, checkpoint: str, version: str | None = None) -> None:
        """Switch to `checkpoint`; completions from now on carry `version`."""

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        """params.n completions for each prompt, in prompt order."""


def default_version(checkpoint: str) -> str:
    """Tag for a checkpoint loaded without a registry version: its directory name."""
    return Path(checkpoint.rstrip("/")).name or checkpoint
