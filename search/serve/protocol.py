"""OpenAI wire format: request bodies in, response bodies out (the subset ratchet serves).

Extensions, ignored by OpenAI clients but read by ratchet's `openai` engine: each choice
carries its own `prompt_tokens` and `completion_tokens`, and `system_fingerprint` holds the
model version that produced the response. For a thinking model (`ReasoningSplit`), a chat
choice's message carries the thought in `reasoning_content` (the field OpenAI-compatible
reasoning servers such as vLLM's use) and the response alone in `content`.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from common.sampling import Completion, SamplingParams


class _SamplingRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")  # fields we do not act on (user, logit_bias...) are ignored

    model: str | None = None
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # vLLM extension
    min_p: float = 0.0  # vLLM extension
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False

    def sampling_params(self, max_tokens: int) -> SamplingParams:
        """Validated SamplingParams; raises ValueError naming the bad field."""
        if self.stream:
            raise ValueError("stream=true is not supported by ratchet serve; send stream=false")
        return SamplingParams(
            n=self.n, temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
            min_p=self.min_p, max_tokens=max_tokens, stop=self.stop, seed=self.seed,
        )


class CompletionRequest(_SamplingRequest):
    prompt: str | list[str]
    max_tokens: int = 16  # OpenAI's default for /v1/completions


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str


class ChatCompletionRequest(_SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = None
    max_completion_tokens: int | None = None  # OpenAI's newer name for max_tokens
    # ratchet's extension: test-time search, e.g. {"k": 16, "verify": 8, "return_candidates": true}
    search: dict[str, Any] | None = None


@dataclass(frozen=True)
class ReasoningSplit:
    """How a thinking model's output splits into a thought and a response (ratchet serve thought_marker=... response_marker=...)."""

    thought_marker: str  # the thought follows it (it may be in the prompt, as TPO's plain prompts end with it)
    response_marker: str  # the response follows it

    def __post_init__(self):
        if not self.thought_marker or not self.response_marker:
            raise ValueError("ReasoningSplit: thought_marker and response_marker must be non-empty")

    def split(self, text: str) -> tuple[str | None, str]:
        """(thought, response); (None, text) when the output has no response marker (nothing guessed)."""
        r = text.find(self.response_marker)
        if r < 0:
            return None, text
        thought = text[:r]
        t = thought.find(self.thought_marker)
        if t >= 0:
            thought = thought[t + len(self.thought_marker):]
        return thought.strip(), text[r + len(self.response_marker):].strip()


def _message(text: str, reasoning: ReasoningSplit | None) -> dict[str, Any]:
    if reasoning is None:
        return {"role": "assistant", "content": text}
    thought, response = reasoning.split(text)
    return {"role": "assistant", "content": response, "reasoning_content": thought}


def _usage(rows: list[list[Completion]]) -> dict[str, int]:
    prompt = sum(row[0].prompt_tokens for row in rows if row)
    completion = sum(c.completion_tokens for row in rows for c in row)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _version(rows: list[list[Completion]]) -> str | None:
    return next((c.model_version for row in rows for c in row), None)


def completion_response(model: str, rows: list[list[Completion]]) -> dict[str, Any]:
    choices = [
        {"index": i, "text": c.text, "finish_reason": c.finish_reason, "logprobs": None,
         "prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens}
        for i, c in enumerate(c for row in rows for c in row)  # index = prompt * n + sample, as OpenAI
    ]
    return {
        "id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
        "model": model, "system_fingerprint": _version(rows), "choices": choices, "usage": _usage(rows),
    }


def chat_response(model: str, rows: list[list[Completion]], reasoning: ReasoningSplit | None = None) -> dict[str, Any]:
    choices = [
        {"index": i, "message": _message(c.text, reasoning), "finish_reason": c.finish_reason,
         "logprobs": None, "prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens}
        for i, c in enumerate(rows[0])
    ]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
        "model": model, "system_fingerprint": _version(rows), "choices": choices, "usage": _usage(rows),
    }


def error_body(message: str, kind: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}
