"""The sampling contract every engine, the pool, the HTTP endpoint, verifiers and judges share.

It sits in common/, the bottom layer, so a verifier or judge can take a `Generate` without
importing the sampling infrastructure above it.

`SamplingParams` uses vLLM's names so a config written for one engine means the same to
the others; `Completion` is what every engine returns, tagged with the model version that
produced it (DESIGN: every completion records its model version).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import regex

# A prompt is plain text, or chat messages ([{"role": ..., "content": ...}, ...]).
Messages = list[dict[str, str]]
Prompt = str | Messages
FinishReason = Literal["stop", "length"]


class ContextLengthError(ValueError):
    """A prompt (plus max_tokens) does not fit the model's context; the request is rejected."""


class UnsupportedParamError(ValueError):
    """An engine cannot honour a sampling parameter (rather than silently ignoring it)."""

    def __init__(self, param: str, message: str):
        super().__init__(param, message)  # both in args, so it pickles across Ray
        self.param = param

    def __str__(self) -> str:
        return self.args[1]


MAX_LOGPROBS = 20  # top logprobs per token, as vLLM's default max_logprobs and OpenAI's top_logprobs


def _compiles(pattern: str) -> bool:
    try:
        regex.compile(pattern)
    except regex.error:
        return False
    return True


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1  # completions per prompt
    temperature: float = 1.0  # 0 = greedy; at most 2 (vLLM's and OpenAI's limit)
    top_p: float = 1.0  # nucleus mass, (0, 1]
    top_k: int = 0  # 0 (or vLLM's -1) = disabled
    min_p: float = 0.0  # drop tokens below min_p * p(max), [0, 1]
    max_tokens: int = 16  # new tokens per completion (vLLM's default)
    stop: tuple[str, ...] = ()  # stop strings, excluded from the text (as vLLM does)
    seed: int | None = None  # same seed + same call = same completions
    # Structured output: every completion matches this regex (vLLM: structured_outputs=
    # StructuredOutputsParams(regex=...)); None = unconstrained.
    regex: str | None = None
    # Log-probabilities per completion token (vLLM's name): None = off; k = the sampled token's
    # and the k most likely tokens' (0 = the sampled token's alone).
    logprobs: int | None = None

    def __post_init__(self):
        stop = self.stop
        if stop is None:
            stop = ()
        elif isinstance(stop, str):
            stop = (stop,)
        object.__setattr__(self, "stop", tuple(stop))
        if self.top_k == -1:  # vLLM's older spelling of "disabled"
            object.__setattr__(self, "top_k", 0)
        checks = [
            ("n", isinstance(self.n, int) and self.n >= 1, "an integer >= 1"),
            ("temperature", 0 <= self.temperature <= 2, "in [0, 2] (0 means greedy; vLLM rejects more than 2)"),
            ("top_p", 0 < self.top_p <= 1, "in (0, 1]"),
            ("top_k", isinstance(self.top_k, int) and self.top_k >= 0, "0/-1 (disabled) or a positive integer"),
            ("min_p", 0 <= self.min_p <= 1, "in [0, 1]"),
            ("max_tokens", isinstance(self.max_tokens, int) and self.max_tokens >= 1, "an integer >= 1"),
            ("stop", all(isinstance(s, str) and s for s in self.stop), "non-empty strings"),
            ("seed", self.seed is None or isinstance(self.seed, int), "an integer or None"),
            ("regex", self.regex is None or (isinstance(self.regex, str) and _compiles(self.regex)),
             "None or a valid regular expression"),
            ("logprobs", self.logprobs is None or (isinstance(self.logprobs, int) and 0 <= self.logprobs <= MAX_LOGPROBS),
             f"None or an integer in [0, {MAX_LOGPROBS}]"),
        ]
        for name, ok, want in checks:
            if not ok:
                raise ValueError(f"SamplingParams.{name}={getattr(self, name)!r} is invalid: it must be {want}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stop"] = list(self.stop)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SamplingParams:
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown sampling parameter(s) {sorted(unknown)}; known: {sorted(cls.__dataclass_fields__)}")
        return cls(**d)


@dataclass
class Completion:
    text: str
    finish_reason: FinishReason  # "stop": EOS or a stop string; "length": max_tokens reached
    prompt_tokens: int
    completion_tokens: int
    model_version: str | None = None  # registry version (or checkpoint name) that produced it
    extra: dict[str, Any] = field(default_factory=dict)  # engine-specific details
    # With SamplingParams.logprobs: one entry per completion token, in OpenAI chat's shape
    # {"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}, ...]}.
    logprobs: list[dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Completion:
        return cls(**d)


def check_counts(results: Sequence[Sequence[Completion]], n_prompts: int, n: int, source: str) -> None:
    """Raise unless there is one list per prompt with exactly n completions each."""
    if len(results) != n_prompts:
        raise RuntimeError(f"{source} returned {len(results)} results for {n_prompts} prompts")
    for i, row in enumerate(results):
        if len(row) != n:
            raise RuntimeError(f"{source} returned {len(row)} completions for prompt {i}, asked for n={n}")


PREFILL = "prefill"  # key of a final assistant message the model continues (see prefilled)


def prefilled(messages: Messages, text: str) -> Messages:
    """`messages` plus the start of the assistant's answer, which the model continues (a thought
    marker, a code fence), as transformers' and vLLM's `continue_final_message` do. Explicit,
    because a client's trailing assistant message is a finished turn, not a prefill."""
    return [*messages, {"role": "assistant", "content": text, PREFILL: True}]


def is_prefilled(prompt: Prompt) -> bool:
    return isinstance(prompt, list) and bool(prompt) and prompt[-1].get("role") == "assistant" \
        and bool(prompt[-1].get(PREFILL))


def user_text(prompt: Prompt) -> str | None:
    """What the user asked: a text prompt itself, else the last user message (None without one)."""
    if isinstance(prompt, str):
        return prompt
    users = [m["content"] for m in prompt if m.get("role") == "user"]
    return users[-1] if users else None


def render_prompt(tokenizer: Any, prompt: Prompt) -> str:
    """Prompt text for a model: messages go through the tokenizer's chat template when it has one."""
    if isinstance(prompt, str):
        return prompt
    if not isinstance(prompt, list) or not all(isinstance(m, dict) and "content" in m for m in prompt):
        raise ValueError("a prompt must be a string or a list of {'role', 'content'} messages")
    prefill = is_prefilled(prompt)
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=not prefill,
                                             continue_final_message=prefill)
    # No template: a plain role-tagged transcript, so base models still get a usable prompt.
    lines = [f"{m.get('role', 'user')}: {m['content']}" for m in prompt]
    return "\n".join(lines) if prefill else "\n".join(lines) + "\nassistant:"


def truncate_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Text up to the earliest stop string (excluded), and whether one was found."""
    cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def context_error(prompt_index: int, prompt_tokens: int, max_tokens: int, context: int) -> ContextLengthError:
    return ContextLengthError(
        f"prompt {prompt_index} has {prompt_tokens} tokens and max_tokens is {max_tokens}: "
        f"{prompt_tokens + max_tokens} exceeds the model's maximum context length of {context} tokens; "
        "shorten the prompt or lower max_tokens"
    )


# Any async sampler: SamplerPool.submit/generate, or an engine's generate run in a thread.
Generate = Callable[[Sequence[Prompt], SamplingParams], Awaitable[list[list["Completion"]]]]


def threaded_generate(engine: Any) -> Generate:
    """An in-process engine (search.engines: anything with generate(prompts, params)) as a Generate:
    each call in a thread, so the event loop goes on meanwhile, one at a time (an engine is not
    re-entrant; a threading lock, so it serves any number of event loops, as asyncio.run per phase makes)."""
    lock = threading.Lock()

    def locked(prompts: list[Prompt], params: SamplingParams) -> list[list[Completion]]:
        with lock:
            return engine.generate(prompts, params)

    async def generate(prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        return await asyncio.to_thread(locked, list(prompts), params)

    return generate
