"""Caps on what one request may ask for, so one client cannot occupy the pool (or its memory).

Checked after parsing and before any sampling; each refusal is a 400 naming the field and the
cap, with OpenAI's codes (`integer_above_max_value`, `array_above_max_length`, ...). The body
size is capped earlier, before parsing (search/serve/guard.py, 413).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from common.sampling import MAX_LOGPROBS
from search.serve.protocol import APIError, ChatCompletionRequest, CompletionRequest


@dataclass(frozen=True)
class ServeLimits:
    max_body_bytes: int = 2 * 1024 * 1024  # request body, checked before the JSON is parsed (413)
    max_n: int = 64  # completions per prompt
    max_prompts: int = 64  # prompts in one /v1/completions request
    max_tokens: int | None = None  # max_tokens (and search.verify_max_tokens); None: the model's context
    max_stop: int = 4  # stop strings (OpenAI's limit)
    max_stop_chars: int = 256  # characters per stop string
    max_logprobs: int = MAX_LOGPROBS  # logprobs (completions) / top_logprobs (chat)
    max_search_k: int = 64  # search.k: candidates
    max_search_verify: int = 32  # search.verify (and search.preliminary): verdicts per candidate
    max_search_k_tie: int = 16  # search.k_tie: comparisons per matchup

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"ServeLimits.{f.name}={value!r} must be a positive integer"
                                 + (" or None" if f.name == "max_tokens" else ""))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ServeLimits:
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown serve limit(s) {sorted(unknown)}; known: {sorted(f.name for f in fields(cls))}")
        return cls(**d)

    def token_cap(self, context_length: int | None) -> int | None:
        caps = [c for c in (self.max_tokens, context_length) if c is not None]
        return min(caps) if caps else None


def _over(param: str, value: int, cap: int, what: str, code: str = "integer_above_max_value") -> APIError:
    return APIError(400, f"{param}={value} exceeds this server's limit of {cap} {what}; lower it",
                    param=param, code=code)


def check_request(req: CompletionRequest | ChatCompletionRequest, max_tokens: int, limits: ServeLimits,
                  context_length: int | None) -> None:
    """Raise a 400 naming the first field over its cap."""
    if req.n > limits.max_n:
        raise _over("n", req.n, limits.max_n, "completions per prompt")
    if isinstance(req, CompletionRequest) and isinstance(req.prompt, list) and len(req.prompt) > limits.max_prompts:
        raise _over("prompt", len(req.prompt), limits.max_prompts, "prompts per request", "array_above_max_length")
    cap = limits.token_cap(context_length)
    if cap is not None and max_tokens > cap:
        name = "max_tokens" if isinstance(req, CompletionRequest) or req.max_completion_tokens is None \
            else "max_completion_tokens"
        raise _over(name, max_tokens, cap, "tokens (the model's context or ServeLimits.max_tokens)")
    stops = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    if len(stops) > limits.max_stop:
        raise _over("stop", len(stops), limits.max_stop, "stop strings", "array_above_max_length")
    for s in stops:
        if len(s) > limits.max_stop_chars:
            raise _over("stop", len(s), limits.max_stop_chars, "characters per stop string", "string_above_max_length")
    top = req.logprobs if isinstance(req, CompletionRequest) else req.top_logprobs
    if top is not None and top > limits.max_logprobs:
        raise _over("logprobs" if isinstance(req, CompletionRequest) else "top_logprobs", top, limits.max_logprobs,
                    "top logprobs per token")
    if isinstance(req, ChatCompletionRequest) and req.search is not None:
        _check_search(req.search, limits, cap)


def _check_search(search: dict[str, Any], limits: ServeLimits, token_cap: int | None) -> None:
    caps = {"k": limits.max_search_k, "verify": limits.max_search_verify,
            "preliminary": limits.max_search_verify, "k_tie": limits.max_search_k_tie,
            "verify_max_tokens": token_cap}
    for key, cap in caps.items():
        value = search.get(key)
        if cap is not None and isinstance(value, int) and value > cap:
            raise _over(f"search.{key}", value, cap, "(ServeLimits)")
