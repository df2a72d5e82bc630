"""`stream=true`: server-sent events in OpenAI's chunk format, as completions arrive.

    data: {"object": "text_completion", "choices": [{"index": 3, "text": ..., "finish_reason": ...}], ...}
    data: {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {...}}], ...}
    data: {"choices": [], "usage": {...}}        # with stream_options.include_usage
    data: [DONE]

The granularity is the engine's: a prompt's n completions arrive together when its request
finishes, so each choice is streamed whole (chat: a delta with the role and the text, then
a delta closing it with its finish_reason). Choice `index` is prompt * n + sample, as in
the non-streamed response. The events are produced from an async iterator over
(prompt index, completions); closing them (a client that went away) closes that iterator,
which cancels the prompts' requests still queued or running in the pool.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from common.sampling import Completion
from search.serve.protocol import (
    APIError,
    ReasoningSplit,
    chat_logprobs,
    completion_logprobs,
    error_body,
    message,
)

log = logging.getLogger("ratchet.serve")

Rows = AsyncIterator[tuple[int, list[Completion]]]


def sse(data: dict[str, Any] | str) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"


class _Chunks:
    """The fields every chunk of one response shares, and the running usage."""

    def __init__(self, obj: str, prefix: str, model: str, include_usage: bool):
        self.base = {"id": f"{prefix}-{uuid.uuid4().hex}", "object": obj, "created": int(time.time()), "model": model}
        self.include_usage = include_usage
        self.prompt_tokens = self.completion_tokens = 0

    def chunk(self, choices: list[dict[str, Any]], version: str | None) -> dict[str, Any]:
        out = self.base | {"system_fingerprint": version, "choices": choices}
        return out | {"usage": None} if self.include_usage else out

    def count(self, row: list[Completion]) -> None:
        self.prompt_tokens += row[0].prompt_tokens if row else 0
        self.completion_tokens += sum(c.completion_tokens for c in row)

    def usage(self) -> dict[str, Any]:
        total = self.prompt_tokens + self.completion_tokens
        return self.base | {"choices": [], "usage": {"prompt_tokens": self.prompt_tokens,
                                                     "completion_tokens": self.completion_tokens,
                                                     "total_tokens": total}}


def completion_choices(row: list[Completion], first_index: int) -> list[dict[str, Any]]:
    return [{"index": first_index + k, "text": c.text, "logprobs": completion_logprobs(c),
             "finish_reason": c.finish_reason} for k, c in enumerate(row)]


def chat_choices(row: list[Completion], reasoning: ReasoningSplit | None) -> list[list[dict[str, Any]]]:
    """Per sample: a delta with the role and the whole text, then one closing it."""
    return [[{"index": k, "delta": message(c.text, reasoning), "logprobs": chat_logprobs(c), "finish_reason": None},
             {"index": k, "delta": {}, "logprobs": None, "finish_reason": c.finish_reason}]
            for k, c in enumerate(row)]


async def completion_events(rows: Rows, *, model: str, n: int, include_usage: bool) -> AsyncIterator[str]:
    chunks = _Chunks("text_completion", "cmpl", model, include_usage)
    async with aclosing(rows):
        async for i, row in rows:
            chunks.count(row)
            for choice in completion_choices(row, i * n):
                yield sse(chunks.chunk([choice], row[0].model_version))
    if include_usage:
        yield sse(chunks.usage())
    yield sse("[DONE]")


async def chat_events(rows: Rows, *, model: str, include_usage: bool, reasoning: ReasoningSplit | None
                      ) -> AsyncIterator[str]:
    chunks = _Chunks("chat.completion.chunk", "chatcmpl", model, include_usage)
    async with aclosing(rows):
        async for _, row in rows:
            chunks.count(row)
            for pair in chat_choices(row, reasoning):
                for choice in pair:
                    yield sse(chunks.chunk([choice], row[0].model_version))
    if include_usage:
        yield sse(chunks.usage())
    yield sse("[DONE]")


async def with_first(rows: Rows) -> Rows:
    """Start the stream now, so that an error before the first result is an HTTP error (400,
    500), not an event; returns an iterator that yields that first result again."""
    try:
        first = await anext(rows)
    except StopAsyncIteration:
        first = None
    except BaseException:
        await rows.aclose()
        raise

    async def chained() -> Rows:
        async with aclosing(rows):
            if first is None:
                return
            yield first
            async for item in rows:
                yield item

    return chained()


async def guarded(events: AsyncIterator[str], to_error: Any) -> AsyncIterator[str]:
    """The events, ending with an OpenAI error event (which the openai SDK raises) if sampling
    fails after the response began; `to_error(exception)` maps it to (status, error body)."""
    async with aclosing(events):
        try:
            async for event in events:
                yield event
        except APIError as e:
            yield sse(error_body(str(e), e.kind, e.param, e.code))
        except Exception as e:
            yield sse(to_error(e))
