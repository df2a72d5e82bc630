"""Stand-in for vllm.outputs: what LLM.generate returns, one RequestOutput per prompt."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Logprob:
    """vllm.logprobs.Logprob: one candidate token's log-probability and rank (1 = most likely)."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None = None
    logprobs: list[dict[int, Logprob]] | None = None  # per output token: top candidates + the sampled one
    finish_reason: str | None = None  # "stop", "length", "abort" or "error"
    stop_reason: int | str | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    prompt_logprobs: None
    outputs: list[CompletionOutput]
    finished: bool
