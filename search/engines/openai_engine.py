"""The openai engine: any OpenAI-compatible server (`ratchet serve`, `vllm serve`, hosted APIs).

Plain-text prompts go to /v1/completions (batched, several prompts per request); chat
messages go to /v1/chat/completions, one conversation per request. Requests run
concurrently under a limit and are retried by the openai SDK itself (`max_retries`: on 408,
409, 429, 5xx, timeouts and dropped connections, waiting as the server's `Retry-After` says,
else with exponential backoff and jitter).

The model name requests send: `model` (engine_kwargs.model, the name the server serves) when
it is set, whatever checkpoint the pool hands the engine: that checkpoint is then the job's
local copy of what the server serves (SOAR's model.checkpoint), not a name the server knows.
Without `model`, `load(name)` names the served model (scaling's `model:`), and without either
the server's first model is used. `probe_server` asks a server, before a job samples, what it
serves and whether it takes the vLLM extensions the job will send (search/engines/checks.py).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
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


RETRIED = (408, 409, 429)  # the 4xx statuses the openai SDK retries: a busy or slow server, not a bad request


class OpenAIEngine:
    def __init__(
        self,
        base_url: str,  # e.g. http://127.0.0.1:8000/v1
        *,
        model: str | None = None,  # the served model name to send; None: the loaded name, else the server's first
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
        self.served = model  # the configured name: sent whatever checkpoint is loaded
        self.model = model
        self._local: str | None = None  # the first checkpoint loaded with `served` set: the local copy
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
        """Without a configured `model`, `checkpoint` is the served name to send. With one, the
        first checkpoint is the local copy of what the server serves and the name stays; a later,
        other checkpoint (a version the job trained) is refused: the server does not serve it."""
        if self.served is None:
            self.model = checkpoint
        elif self._local is None:
            self._local = checkpoint
        elif checkpoint not in (self._local, self.served):
            raise ValueError(f"the openai engine cannot switch to {version or checkpoint} ({checkpoint}): the server "
                             f"at {self.base_url} serves {self.served!r}, not a checkpoint this job trained; sample "
                             "trained versions with sampler.engine=transformers or vllm")
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
        except openai.APIStatusError as e:
            if e.status_code in RETRIED or e.status_code >= 500:  # the SDK's retries are spent: the server's fault
                raise
            # any other 4xx (a bad field, an unknown model, a refused key) is the request's own
            # fault, the same on every actor and every try: a ValueError, never retried
            message = _error_message(e)
            if "context length" in message:
                raise ContextLengthError(message) from e
            raise ValueError(f"{self.base_url} rejected the request ({e.status_code}): {message}") from e


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
    if isinstance(body.get("error"), dict):  # some servers nest it: {"error": {"message": ...}}
        body = body["error"]
    return str(body.get("message") or e.message)


# --- what a server serves and takes, asked before a job samples ----------------------------------
# vLLM's request extensions a job may send (vllm serve and ratchet serve take both; OpenAI's API
# neither): structured_outputs constrains the output (SamplingParams.regex), continue_final_message
# continues a prefilled assistant message (common.sampling.prefilled).
EXTENSIONS = ("structured_outputs", "continue_final_message")


class ServerUnavailable(Exception):
    """The server cannot be asked: one line saying why; `kind` says what to fix: "unreachable"
    (no answer), "auth" (a refused key), "path" (no /models there), "failed" (a 5xx)."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


@dataclass
class ServerProbe:
    models: list[str]  # the ids GET /models lists, in its order
    # extension -> the server's answer to a 1-token request carrying it (absent: it took it)
    refused: dict[str, str] = field(default_factory=dict)


def probe_server(base_url: str, *, api_key: str | None = None, model: str | None = None,
                 needs: Sequence[str] = (), chat: bool = False, timeout_s: float = 30.0) -> ServerProbe:
    """Ask `base_url` what it serves (GET /models) and, when `model` (None: its first) is served,
    whether it takes each extension in `needs`: one 1-token request each, as a chat when the job
    sends chats (`chat`; continue_final_message always is one). No retries: this runs before a
    job starts, where a wrong URL or key should be said at once."""
    unknown = sorted(set(needs) - set(EXTENSIONS))
    if unknown:
        raise ValueError(f"probe_server: unknown extensions {unknown}; known: {list(EXTENSIONS)}")
    client = openai.OpenAI(base_url=base_url, api_key=api_key or "EMPTY", max_retries=0, timeout=timeout_s)
    try:
        try:
            models = [m.id for m in client.models.list().data]
        except openai.APIStatusError as e:
            kind = {401: "auth", 403: "auth", 404: "path"}.get(e.status_code, "failed")
            raise ServerUnavailable(f"GET /models answered {e.status_code} ({_error_message(e)})", kind) from None
        except (openai.APIConnectionError, openai.APITimeoutError) as e:
            cause = e.__cause__ or e
            raise ServerUnavailable(f"no server answers there ({type(cause).__name__}: {cause})",
                                    "unreachable") from None
        name = model or (models[0] if models else None)
        refused: dict[str, str] = {}
        if name in models:
            for extension in needs:
                try:
                    _extension_request(client, name, extension, chat)
                except openai.APIStatusError as e:
                    if e.status_code in (401, 403) or e.status_code >= 500:
                        raise ServerUnavailable(f"a 1-token request with {extension} answered {e.status_code} "
                                                f"({_error_message(e)})",
                                                "auth" if e.status_code < 500 else "failed") from None
                    refused[extension] = f"{e.status_code}: {_error_message(e)}"
                except (openai.APIConnectionError, openai.APITimeoutError) as e:
                    raise ServerUnavailable(f"no answer to a 1-token request within {timeout_s:g} s "
                                            f"({type(e).__name__})", "unreachable") from None
        return ServerProbe(models, refused)
    finally:
        client.close()


def _extension_request(client: Any, model: str, extension: str, chat: bool) -> None:
    """One request of 1 token that carries `extension` (vLLM's spelling, as the engine sends it)."""
    base: dict[str, Any] = dict(model=model, max_tokens=1, temperature=0.0)
    if extension == "continue_final_message":
        client.chat.completions.create(
            messages=[{"role": "user", "content": "Answer yes or no."}, {"role": "assistant", "content": "Answer:"}],
            extra_body={"continue_final_message": True, "add_generation_prompt": False}, **base)
    elif chat:
        client.chat.completions.create(messages=[{"role": "user", "content": "Answer 0 or 1."}],
                                       extra_body={"structured_outputs": {"regex": "[01]"}}, **base)
    else:
        client.completions.create(prompt="0 or 1:", extra_body={"structured_outputs": {"regex": "[01]"}}, **base)
