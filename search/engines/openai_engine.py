"""The openai engine: any OpenAI-compatible server (`ratchet serve`, `vllm serve`, hosted APIs).

Plain-text prompts go to /v1/completions (batched, several prompts per request); chat
messages go to /v1/chat/completions, one conversation per request. Requests run
concurrently under a limit and are retried by the openai SDK itself (`max_retries`: on 408,
409, 429, 5xx, timeouts and dropped connections, waiting as the server's `Retry-After` says,
else with exponential backoff and jitter). `load(name)` switches the served model name used
in requests: a remote server loads its own checkpoints.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import openai

from common.sampling import (
    PREFILL,
    Completion,
    ContextLengthError,
    Prompt,
    SamplingParams,
    check_counts,
    is_prefilled,
)


def request_groups(prompts: Sequence[Prompt], params: SamplingParams, size: int
                   ) -> list[tuple[list[int], SamplingParams]]:
    """Split one call into requests: up to `size` text prompts each, one chat each.

    A server applies a request's seed to every prompt in it (vLLM does), so identical prompts
    would get identical completions: a seeded call never puts a prompt twice in one request,
    and each request gets its own seed (the call's seed + its first prompt's index).
    """
    groups: list[list[int]] = []
    open_group: list[int] = []
    for i, p in enumerate(prompts):
        if not isinstance(p, str):
            groups.append([i])
            continue
        repeats = params.seed is not None and any(prompts[j] == p for j in open_group)
        if len(open_group) == size or repeats:
            groups.append(open_group)
            open_group = []
        open_group.append(i)
    if open_group:
        groups.append(open_group)
    groups.sort(key=lambda g: g[0])
    if params.seed is None:
        return [(g, params) for g in groups]
    return [(g, replace(params, seed=params.seed + g[0])) for g in groups]


class OpenAIEngine:
    def __init__(
        self,
        base_url: str,  # e.g. http://127.0.0.1:8000/v1
        *,
        model: str | None = None,  # None: the first model the server lists
        api_key: str | None = None,  # None: "EMPTY" (servers without auth ignore it)
        max_concurrency: int = 16,  # HTTP requests in flight at once
        max_retries: int = 4,  # the SDK's retries per request on 408/409/429/5xx/timeouts/dropped connections
        timeout_s: float = 120.0,  # per HTTP request
        prompts_per_request: int = 16,  # text prompts batched into one /v1/completions call
        http_client: Any = None,  # an httpx.AsyncClient (tests pass one with a mock transport)
    ):
        for name, value, low in [("max_concurrency", max_concurrency, 1), ("max_retries", max_retries, 0),
                                 ("prompts_per_request", prompts_per_request, 1)]:
            if value < low:
                raise ValueError(f"{name}={value} must be >= {low}")
        self.base_url = base_url
        self.model = model
        self.api_key = api_key or "EMPTY"
        self.max_concurrency = max_concurrency
        self.max_retries = max_retries
        self.timeout_s = timeout_s
        self.prompts_per_request = prompts_per_request
        self.http_client = http_client
        self.version: str | None = model
        self.context_length: int | None = None  # the server enforces its own
        self._client: Any = None
        self._client_loop: Any = None

    def load(self, checkpoint: str, version: str | None = None) -> None:
        self.model = checkpoint
        self.version = version or checkpoint

    def _client_for_loop(self) -> Any:
        # httpx connection pools belong to one event loop: a new loop gets a new client.
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            self._client = openai.AsyncOpenAI(
                base_url=self.base_url, api_key=self.api_key, max_retries=self.max_retries, timeout=self.timeout_s,
                http_client=self.http_client,
            )
            self._client_loop = loop
            self._semaphore = asyncio.Semaphore(self.max_concurrency)
        return self._client

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        """Blocking form of agenerate; safe to call from inside a running event loop too."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self._generate_once(prompts, params))
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["result"] = asyncio.run(self._generate_once(prompts, params))
            except BaseException as e:  # re-raised in the caller's thread
                box["error"] = e

        thread = threading.Thread(target=run)
        thread.start()
        thread.join()
        if "error" in box:
            raise box["error"]
        return box["result"]

    async def _generate_once(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        """agenerate in a loop that ends with it: its client (sockets, pool) is closed before the
        loop closes, not later from another loop (which fails and logs 'Event loop is closed')."""
        try:
            return await self.agenerate(prompts, params)
        finally:
            if self._client is not None and self._client_loop is asyncio.get_running_loop():
                client, self._client, self._client_loop = self._client, None, None
                if self.http_client is None:  # a client passed in is its owner's to close
                    await client.close()

    async def agenerate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        client = self._client_for_loop()
        if self.model is None:
            self.model = (await self._call(client.models.list)).data[0].id
            self.version = self.version or self.model
        jobs: list[tuple[list[int], Any]] = []
        for idx, request_params in request_groups(prompts, params, self.prompts_per_request):
            if isinstance(prompts[idx[0]], str):
                jobs.append((idx, self._completions(client, [prompts[i] for i in idx], request_params)))
            else:
                jobs.append((idx, self._chat(client, prompts[idx[0]], request_params)))
        results: list[list[Completion]] = [[] for _ in prompts]
        for (idx, _), rows in zip(jobs, await asyncio.gather(*(job for _, job in jobs)), strict=True):
            for i, row in zip(idx, rows, strict=True):
                results[i] = row
        check_counts(results, len(prompts), params.n, f"openai engine ({self.base_url})")
        return results

    def _request_args(self, params: SamplingParams) -> dict[str, Any]:
        args: dict[str, Any] = dict(
            model=self.model, n=params.n, temperature=params.temperature, top_p=params.top_p,
            max_tokens=params.max_tokens,
        )
        if params.stop:
            args["stop"] = list(params.stop)
        if params.seed is not None:
            args["seed"] = params.seed
        extra: dict[str, Any] = {k: v for k, v in (("top_k", params.top_k), ("min_p", params.min_p)) if v}
        if params.regex is not None:  # vLLM's OpenAI server's structured-output extension
            extra["structured_outputs"] = {"regex": params.regex}
        if params.logprobs is not None:  # completions take the top count; chat_logprobs() rewrites it for chat
            args["logprobs"] = params.logprobs
        if extra:  # not in OpenAI's API; vLLM and ratchet serve accept them
            args["extra_body"] = extra
        return args

    async def _completions(self, client: Any, prompts: list[str], params: SamplingParams) -> list[list[Completion]]:
        resp = await self._call(client.completions.create, prompt=prompts, **self._request_args(params))
        choices = sorted(resp.choices, key=lambda c: c.index)  # index = prompt * n + sample
        return self._rows(resp, [(c.text, c.finish_reason, c, _completion_logprobs(c.logprobs)) for c in choices],
                          len(prompts), params.n)

    async def _chat(self, client: Any, messages: list[dict[str, str]], params: SamplingParams) -> list[list[Completion]]:
        args = self._request_args(params)
        if "logprobs" in args:  # chat asks for a flag and a top count
            args["logprobs"], args["top_logprobs"] = True, args["logprobs"]
        if is_prefilled(messages):  # vLLM's chat extension continues the final assistant message
            args["extra_body"] = {**args.get("extra_body", {}), "continue_final_message": True,
                                  "add_generation_prompt": False}
            messages = [{k: v for k, v in m.items() if k != PREFILL} for m in messages]
        resp = await self._call(client.chat.completions.create, messages=messages, **args)
        choices = sorted(resp.choices, key=lambda c: c.index)
        return self._rows(resp, [(c.message.content or "", c.finish_reason, c, _chat_logprobs(c.logprobs))
                                 for c in choices], 1, params.n)

    def _rows(self, resp: Any, choices: list[tuple[str, str, Any, Any]], n_prompts: int, n: int
              ) -> list[list[Completion]]:
        if len(choices) != n_prompts * n:
            raise RuntimeError(f"{self.base_url} returned {len(choices)} choices for {n_prompts} prompts x n={n}")
        usage = resp.usage
        prompt_tokens = (usage.prompt_tokens // n_prompts) if usage else 0
        total = usage.completion_tokens if usage else 0
        version = getattr(resp, "system_fingerprint", None) or resp.model
        completions = []
        for k, (text, finish, choice, logprobs) in enumerate(choices):
            # Per-choice counts are a ratchet serve extension; elsewhere split usage evenly.
            tokens = (choice.model_extra or {}).get("completion_tokens")
            if tokens is None:
                tokens = total // len(choices) + (1 if k < total % len(choices) else 0)
            completions.append(Completion(
                text=text, finish_reason="length" if finish == "length" else "stop",
                prompt_tokens=(choice.model_extra or {}).get("prompt_tokens", prompt_tokens),
                completion_tokens=int(tokens), model_version=version, logprobs=logprobs,
            ))
        return [completions[i * n : (i + 1) * n] for i in range(n_prompts)]

    async def _call(self, call: Any, **kwargs: Any) -> Any:
        """One request under the concurrency limit; the SDK retries it (max_retries)."""
        try:
            async with self._semaphore:
                return await call(**kwargs)
        except openai.BadRequestError as e:  # never retried: the request itself is wrong
            message = _error_message(e)
            if "context length" in message:
                raise ContextLengthError(message) from e
            raise ValueError(f"{self.base_url} rejected the request: {message}") from e


def _entry(token: str, logprob: float, top: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    out = {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}
    return out if top is None else out | {"top_logprobs": top}


def _completion_logprobs(lp: Any) -> list[dict[str, Any]] | None:
    """/v1/completions' parallel lists -> the per-token entries Completion.logprobs holds."""
    if lp is None or lp.tokens is None:
        return None
    tops = lp.top_logprobs or [None] * len(lp.tokens)
    return [_entry(t, v, [_entry(a, b) for a, b in (top or {}).items()])
            for t, v, top in zip(lp.tokens, lp.token_logprobs, tops, strict=True)]


def _chat_logprobs(lp: Any) -> list[dict[str, Any]] | None:
    if lp is None or lp.content is None:
        return None
    return [_entry(c.token, c.logprob, [_entry(t.token, t.logprob) for t in c.top_logprobs or []]) for c in lp.content]


def _error_message(e: openai.APIStatusError) -> str:
    body = e.body if isinstance(e.body, dict) else {}
    return str(body.get("message") or e.message)
