"""OpenAI wire format: request bodies in, response bodies out (the subset ratchet serves).

Extensions, ignored by OpenAI clients but read by ratchet's `openai` engine: each choice
carries its own `prompt_tokens` and `completion_tokens`, and `system_fingerprint` holds the
model version that produced the response. For a thinking model (`ReasoningSplit`), a chat
choice's message carries the thought in `reasoning_content` (the field OpenAI-compatible
reasoning servers such as vLLM's use) and the response alone in `content`.

vLLM's chat extensions `continue_final_message` and `add_generation_prompt` are honoured as vLLM
honours them (the final assistant message continued, its turn left open), so the `openai`
engine's prefilled prompts (common.sampling.prefilled) reach the engines behind ratchet serve.

Every field is honoured or refused: OpenAI's fields that would change the answer and that
ratchet cannot honour (penalties, logit_bias, tools, response_format other than text, ...)
and fields nobody defined are a 400 naming the field, never silently dropped.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal

import regex
from pydantic import BaseModel, ConfigDict, Field, field_validator

from common.sampling import PREFILL, Completion, SamplingParams


class APIError(Exception):
    """An error answered in OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.kind, self.param, self.code = status, kind, param, code


def _refuse(param: str, message: str) -> APIError:
    return APIError(400, f"{param}: {message}", param=param, code="unsupported_parameter")


# Fields OpenAI's API defines that ratchet serve accepts only at their no-op value: anything
# else would change the answer, so it is refused (400 naming the field), never ignored.
_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "presence_penalty": (None, 0, 0.0), "frequency_penalty": (None, 0, 0.0), "logit_bias": (None, {}),
    "echo": (None, False), "suffix": (None, ""), "tools": (None, []), "tool_choice": (None, "none", "auto"),
    "functions": (None, []), "function_call": (None, "none", "auto"), "parallel_tool_calls": (None, True, False),
}
_STRUCTURED_KEYS = ("regex", "choice")  # of vLLM's structured_outputs; json, grammar... are refused


class _SamplingRequest(BaseModel):
    # Unknown fields are kept (not dropped) so refuse_unsupported() can name them.
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # vLLM extension
    min_p: float = 0.0  # vLLM extension
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None  # {"include_usage": true}: a last chunk with the usage
    structured_outputs: dict[str, Any] | None = None  # vLLM's extension: {"regex": ...} or {"choice": [...]}
    user: str | None = None  # an end-user id, for the caller's own records
    metadata: dict[str, Any] | None = None

    def refuse_unsupported(self) -> None:
        """Raise a 400 naming the first field ratchet serve would otherwise have to ignore."""
        for name in self.model_extra or {}:
            if name not in _NEUTRAL:
                raise _refuse(name, "unknown field: ratchet serve does not support it; remove it")
            if (self.model_extra or {})[name] not in _NEUTRAL[name]:
                raise _refuse(name, f"not supported by ratchet serve; omit it or send {_NEUTRAL[name][1]!r}")
        if self.stream_options is not None:
            if not self.stream:
                raise _refuse("stream_options", "only allowed with stream=true")
            for key, value in self.stream_options.items():
                if key != "include_usage" and value:
                    raise _refuse(f"stream_options.{key}", "not supported; only include_usage is")
        for key in self.structured_outputs or {}:
            if key not in _STRUCTURED_KEYS:
                raise _refuse(f"structured_outputs.{key}",
                              f"not supported; ratchet serve constrains output with {' or '.join(_STRUCTURED_KEYS)}")

    @property
    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))

    def regex(self) -> str | None:
        so = self.structured_outputs or {}
        if "regex" in so and "choice" in so:
            raise _refuse("structured_outputs", "send one of regex or choice, not both")
        if "choice" in so:
            choices = so["choice"]
            if not isinstance(choices, list) or not choices or not all(isinstance(c, str) for c in choices):
                raise _refuse("structured_outputs.choice", "must be a non-empty list of strings")
            return "(" + "|".join(regex.escape(c) for c in choices) + ")"
        return so.get("regex")

    def logprobs_count(self) -> int | None:
        return None

    def sampling_params(self, max_tokens: int) -> SamplingParams:
        """Validated SamplingParams; raises ValueError naming the bad field."""
        return SamplingParams(
            n=self.n, temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
            min_p=self.min_p, max_tokens=max_tokens, stop=self.stop, seed=self.seed,
            regex=self.regex(), logprobs=self.logprobs_count(),
        )


class CompletionRequest(_SamplingRequest):
    prompt: str | list[str]
    max_tokens: int = 16  # OpenAI's default for /v1/completions
    logprobs: int | None = None  # the top count per token (OpenAI allows 0-5; ratchet up to 20)
    best_of: int | None = None  # accepted only as n (every sample is returned)

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        if self.best_of is not None and self.best_of != self.n:
            raise _refuse("best_of", "not supported (ratchet returns every sample); omit it or send best_of=n")

    def logprobs_count(self) -> int | None:
        return self.logprobs


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str

    @field_validator("content", mode="before")
    @classmethod
    def _text_parts(cls, content: Any) -> Any:
        """Content parts ([{"type": "text", "text": ...}], as newer clients send) are joined; others refused."""
        if not isinstance(content, list):
            return content
        if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
            raise ValueError("only text content parts ({'type': 'text', 'text': ...}) are supported")
        return "".join(p["text"] for p in content)


class ChatCompletionRequest(_SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = None
    max_completion_tokens: int | None = None  # OpenAI's newer name for max_tokens
    logprobs: bool = False
    top_logprobs: int | None = None
    response_format: dict[str, Any] | None = None  # only {"type": "text"}; structured_outputs constrains
    # vLLM's chat extensions, as vLLM reads them: continue the final (assistant) message without
    # closing its turn, instead of opening a new turn with the template's generation prompt
    continue_final_message: bool = False
    add_generation_prompt: bool = True
    # ratchet's extension: test-time search, e.g. {"k": 8, "strategy": "weighted_best_of_n", "return_candidates": true}
    # (search/serve/service_search.py); with stream=true its answer comes as one chunk once chosen
    search: dict[str, Any] | None = None

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        if self.response_format not in (None, {"type": "text"}):
            raise _refuse("response_format", "only {'type': 'text'} is supported; to constrain the output "
                          "send structured_outputs: {'regex': ...}")
        if self.top_logprobs is not None and not self.logprobs:
            raise _refuse("top_logprobs", "needs logprobs=true")
        if self.search is not None and (self.logprobs or self.structured_outputs):
            raise _refuse("search", "cannot be combined with logprobs or structured_outputs")
        if self.continue_final_message:
            if self.add_generation_prompt:  # vLLM refuses the pair the same way
                raise _refuse("continue_final_message", "cannot be combined with add_generation_prompt=true: "
                              "send add_generation_prompt=false with it")
            if self.messages[-1].role != "assistant":
                raise _refuse("continue_final_message", "the final message must be the assistant's, to continue; "
                              f"it is the {self.messages[-1].role}'s")
            if self.search is not None:
                raise _refuse("search", "cannot be combined with continue_final_message")
        elif not self.add_generation_prompt:
            # a transcript ending in a closed turn: no engine's prompt contract says what to sample
            raise _refuse("add_generation_prompt", "false is supported only with continue_final_message=true")

    def prompt_messages(self) -> list[dict[str, Any]]:
        """The messages as the engines take them: a continued final message is marked prefilled."""
        messages = [m.model_dump() for m in self.messages]
        if self.continue_final_message:
            messages[-1][PREFILL] = True
        return messages

    def logprobs_count(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None


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


def message(text: str, reasoning: ReasoningSplit | None) -> dict[str, Any]:
    if reasoning is None:
        return {"role": "assistant", "content": text}
    thought, response = reasoning.split(text)
    return {"role": "assistant", "content": response, "reasoning_content": thought}


def completion_logprobs(c: Completion) -> dict[str, Any] | None:
    """/v1/completions' logprobs: parallel lists (tokens, their logprobs, top tokens, text offsets)."""
    if c.logprobs is None:
        return None
    offsets, at = [], 0
    for e in c.logprobs:
        offsets.append(at)
        at += len(e["token"])
    return {"tokens": [e["token"] for e in c.logprobs], "token_logprobs": [e["logprob"] for e in c.logprobs],
            "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in c.logprobs],
            "text_offset": offsets}


def chat_logprobs(c: Completion) -> dict[str, Any] | None:
    """/v1/chat/completions' logprobs: {"content": [{"token", "logprob", "bytes", "top_logprobs"}]}."""
    return None if c.logprobs is None else {"content": c.logprobs, "refusal": None}


def usage(rows: list[list[Completion]]) -> dict[str, int]:
    prompt = sum(row[0].prompt_tokens for row in rows if row)
    completion = sum(c.completion_tokens for row in rows for c in row)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def version(rows: list[list[Completion]]) -> str | None:
    return next((c.model_version for row in rows for c in row), None)


def completion_response(model: str, rows: list[list[Completion]]) -> dict[str, Any]:
    choices = [
        {"index": i, "text": c.text, "finish_reason": c.finish_reason, "logprobs": completion_logprobs(c),
         "prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens}
        for i, c in enumerate(c for row in rows for c in row)  # index = prompt * n + sample, as OpenAI
    ]
    return {
        "id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
        "model": model, "system_fingerprint": version(rows), "choices": choices, "usage": usage(rows),
    }


def chat_response(model: str, rows: list[list[Completion]], reasoning: ReasoningSplit | None = None) -> dict[str, Any]:
    choices = [
        {"index": i, "message": message(c.text, reasoning), "finish_reason": c.finish_reason,
         "logprobs": chat_logprobs(c), "prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens}
        for i, c in enumerate(rows[0])
    ]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
        "model": model, "system_fingerprint": version(rows), "choices": choices, "usage": usage(rows),
    }


def error_body(message: str, kind: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}
