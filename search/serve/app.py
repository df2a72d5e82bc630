"""The OpenAI-compatible FastAPI app, over any backend that samples (the pool, in production).

Kept apart from Ray Serve so the HTTP behaviour (auth, validation, limits, streaming, error
bodies) is testable with a plain in-process backend. Every error is answered in OpenAI's
error shape; one bad request never takes the service down. A request passes, in order: the
token and the body size (guard.py, before parsing), parsing, the fields ratchet cannot
honour (a 400 naming them, protocol.py), the caps (limits.py), then the pool; `stream=true`
answers with server-sent events (streaming.py).

A chat request with the `search` field runs a test-time search (service_search.py) and answers
with the chosen candidate (as one chunk when streamed); the search stops, and its requests
queued in the pool are dropped, when the client disconnects or its `deadline_s` passes. With a
verifier served beside the model (`ratchet serve verifier=...`), verdicts come from it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import asdict, is_dataclass, replace
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from common.sampling import (
    Completion,
    ContextLengthError,
    Prompt,
    SamplingParams,
    UnsupportedParamError,
    check_counts,
)
from search.serve.guard import RequestGuard, api_key_digest
from search.serve.limits import ServeLimits, check_request
from search.serve.protocol import (
    APIError,
    ChatCompletionRequest,
    CompletionRequest,
    ReasoningSplit,
    chat_response,
    completion_response,
    error_body,
)
from search.serve.service_search import SearchOptions, SearchResult, search_and_select
from search.serve.streaming import chat_events, completion_events, guarded, with_first

log = logging.getLogger("ratchet.serve")


class Backend(Protocol):
    version: str | None
    context_length: int | None  # the model's (None: unknown; the engine still checks each prompt)

    async def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]: ...

    def stream(self, prompts: Sequence[Prompt], params: SamplingParams
               ) -> AsyncIterator[tuple[int, list[Completion]]]: ...


def backend_error(e: Exception) -> APIError | None:
    """The caller's mistakes an engine reports, as 400s; None for anything else (a 500)."""
    if isinstance(e, ContextLengthError):
        return APIError(400, str(e), param="prompt", code="context_length_exceeded")
    if isinstance(e, UnsupportedParamError):
        return APIError(400, f"{e.param}: {e}", param=e.param, code="unsupported_parameter")
    return None


def internal_error(e: BaseException) -> dict[str, Any]:
    """A 500's body: an id to find the traceback in the server log, never the exception's text."""
    incident = uuid.uuid4().hex[:12]
    log.error("request failed (incident %s)", incident, exc_info=e)
    return error_body(f"internal server error (incident {incident}); the server log has the details",
                      "server_error", code="internal_error")


class ClientGone(Exception):
    """The client disconnected before its answer was ready."""


async def disconnected(request: Request) -> None:
    """Returns once the client has gone (its body was read already: what comes next is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def while_connected(request: Request, work: Awaitable[SearchResult], deadline_s: float | None) -> SearchResult:
    """`work`'s result; cancelled (and with it the pool's requests for it) when the client goes away
    (ClientGone) or `deadline_s` passes (a 504), so no tokens are generated for nobody."""
    task, gone = asyncio.ensure_future(work), asyncio.ensure_future(disconnected(request))
    try:
        done, _ = await asyncio.wait({task, gone}, timeout=deadline_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (gone, task):
            t.cancel()
        await asyncio.gather(gone, task, return_exceptions=True)
    if task in done:
        return task.result()
    if gone in done:
        raise ClientGone
    raise APIError(504, f"the search did not finish within search.deadline_s={deadline_s} s and was stopped; "
                   "allow more time, or ask for fewer candidates or verdicts", kind="timeout_error",
                   param="search.deadline_s", code="search_deadline_exceeded")


def build_app(backend: Backend, *, model_name: str, aliases: Sequence[str] = (), api_key: str | None = None,
              api_key_sha256: str | None = None, limits: ServeLimits | None = None, chat_max_tokens: int = 256,
              reasoning: ReasoningSplit | None = None, verifier: Backend | None = None,
              verifier_name: str | None = None) -> FastAPI:
    """`model_name`: the id /v1/models lists first and responses carry; `aliases`: other ids the
    model answers to (listed after it, as vLLM lists its served names).

    `verifier`, `verifier_name`: a second model served beside it (listed by /v1/models, sampled
    when a request names it) that gives a search's verdicts and comparisons.

    `api_key` (or only its `api_key_sha256`, as replicas get it): the bearer token every
    path but /health requires; neither: open access. `chat_max_tokens` is the default when a
    chat request sets neither max_tokens field.

    `reasoning`: a thinking model's chat answers put the thought in `reasoning_content` and
    the response in `content`; None (the default) returns the whole output as `content`.
    """
    limits = limits or ServeLimits()
    digest = api_key_sha256 or (api_key_digest(api_key) if api_key is not None else None)
    app = FastAPI(title="ratchet", description="OpenAI-compatible sampling over ratchet's SamplerPool")
    app.add_middleware(RequestGuard, api_key_sha256=digest, max_body_bytes=limits.max_body_bytes)

    names = [model_name, *(a for a in dict.fromkeys(aliases) if a != model_name)]
    if (verifier is None) != (verifier_name is None):
        raise ValueError("build_app: give verifier and verifier_name together")
    if verifier_name in names:
        raise ValueError(f"build_app: the verifier's name {verifier_name!r} is one of the model's {names}")

    def check_model(model: str | None) -> tuple[str, Backend]:
        """The name and backend a request's `model` asks for (None: the model)."""
        if model is None or model in names:
            return model_name, backend
        if verifier is not None and model == verifier_name:
            return verifier_name, verifier
        served = repr(model_name) if len(names) == 1 else f"{model_name!r} (also named {names[1:]})"
        if verifier is not None:
            served += f" and the verifier {verifier_name!r}"
        raise APIError(404, f"the model {model!r} does not exist; this server serves {served}",
                       param="model", code="model_not_found")

    def params_or_400(req: CompletionRequest | ChatCompletionRequest, max_tokens: int
                      ) -> tuple[SamplingParams, str, Backend]:
        name, target = check_model(req.model)
        req.refuse_unsupported()
        check_request(req, max_tokens, limits, getattr(target, "context_length", None))
        try:
            return req.sampling_params(max_tokens), name, target
        except ValueError as e:
            raise APIError(400, str(e)) from e

    async def sample(prompts: list[Prompt], params: SamplingParams, target: Backend = backend
                     ) -> list[list[Completion]]:
        try:
            rows = await target.generate(prompts, params)
        except Exception as e:
            api = backend_error(e)
            if api is None:
                raise
            raise api from e
        check_counts(rows, len(prompts), params.n, "sampler backend")
        return rows

    async def streamed(prompts: list[Prompt], params: SamplingParams, events: Any, target: Backend = backend
                       ) -> StreamingResponse:
        try:
            rows = await with_first(target.stream(prompts, params))
        except Exception as e:
            api = backend_error(e)
            if api is None:
                raise
            raise api from e

        def to_error(e: Exception) -> dict[str, Any]:
            api = backend_error(e)
            return error_body(str(api), api.kind, api.param, api.code) if api else internal_error(e)

        return StreamingResponse(guarded(events(rows), to_error), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    @app.exception_handler(APIError)
    async def _api_error(_: Request, e: APIError) -> JSONResponse:
        return JSONResponse(error_body(str(e), e.kind, e.param, e.code), status_code=e.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        # OpenAI answers malformed bodies with 400 (FastAPI's default is 422).
        first = e.errors()[0] if e.errors() else {}
        field = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
        message = f"invalid request: {field or 'body'}: {first.get('msg', 'malformed')}"
        return JSONResponse(error_body(message, param=field), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, e: StarletteHTTPException) -> JSONResponse:
        # Unknown routes and methods, in OpenAI's shape rather than FastAPI's {"detail": ...}.
        message = {404: f"no route {request.method} {request.url.path}: the API is under /v1 (see /docs)",
                   405: f"method {request.method} is not allowed on {request.url.path}"}.get(e.status_code, str(e.detail))
        return JSONResponse(error_body(message, code={404: "not_found", 405: "method_not_allowed"}.get(e.status_code)),
                            status_code=e.status_code)

    @app.exception_handler(Exception)
    async def _internal(_: Request, e: Exception) -> JSONResponse:
        return JSONResponse(internal_error(e), status_code=500)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        served = [(name, backend) for name in names] + ([(verifier_name, verifier)] if verifier else [])
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": int(time.time()), "owned_by": "ratchet",
             "version": target.version} for name, target in served
        ]}

    @app.post("/v1/completions", response_model=None)
    async def completions(req: CompletionRequest) -> dict[str, Any] | StreamingResponse:
        prompts: list[Prompt] = [req.prompt] if isinstance(req.prompt, str) else list(req.prompt)
        if not prompts:
            raise APIError(400, "prompt is an empty list: send at least one prompt", param="prompt")
        params, name, target = params_or_400(req, req.max_tokens)
        if req.stream:
            return await streamed(prompts, params, lambda rows: completion_events(
                rows, model=name, n=params.n, include_usage=req.include_usage), target)
        return completion_response(name, await sample(prompts, params, target))

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(req: ChatCompletionRequest, request: Request) -> dict[str, Any] | StreamingResponse | JSONResponse:
        max_tokens = next((m for m in (req.max_completion_tokens, req.max_tokens) if m is not None), chat_max_tokens)
        params, name, target = params_or_400(req, max_tokens)
        messages = req.prompt_messages()
        if req.search is not None:
            return await searched_chat(request, req, messages, params, name, target)
        if req.stream:
            return await streamed([messages], params, lambda rows: chat_events(
                rows, model=name, include_usage=req.include_usage, reasoning=reasoning), target)
        return chat_response(name, await sample([messages], params, target), reasoning)

    async def searched_chat(request: Request, req: ChatCompletionRequest, messages: list[dict],
                            params: SamplingParams, name: str, target: Backend
                            ) -> dict[str, Any] | StreamingResponse | JSONResponse:
        """Test-time search: k candidates from `target`, verdicts from the verifier (else `target`), one answer."""
        try:
            options = SearchOptions.from_request(req.search)
        except (TypeError, ValueError) as e:
            raise APIError(400, str(e), param="search") from e

        async def candidates(prompts: list[Prompt], p: SamplingParams) -> list[list[Completion]]:
            return await sample(prompts, p, target)

        async def verdicts(prompts: list[Prompt], p: SamplingParams) -> list[list[Completion]]:
            return await sample(prompts, p, verifier or target)

        try:
            result = await while_connected(request, search_and_select(
                candidates, messages, options=options, params=params, verifier=verdicts), options.deadline_s)
        except ClientGone:
            log.info("the client went away mid-search; the search was stopped")
            return JSONResponse(error_body("client closed the request", code="client_closed_request"),
                                status_code=499)
        # usage counts every token the search spent: candidates, verdicts and comparisons
        chosen = replace(result.completion, completion_tokens=result.completion_tokens)
        if req.stream:
            async def one() -> AsyncIterator[tuple[int, list[Completion]]]:
                yield 0, [chosen]
            return StreamingResponse(chat_events(one(), model=name, include_usage=req.include_usage,
                                                 reasoning=reasoning),
                                     media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        body = chat_response(name, [[chosen]], reasoning)
        if req.search.get("return_candidates"):
            body["search"] = result.to_dict()
        return body

    @app.get("/stats")
    async def stats() -> dict[str, Any]:
        """The pool's actors: versions, requests served and cancelled, queue depths."""
        if not hasattr(backend, "stats"):
            raise APIError(404, "this backend keeps no stats", code="not_found")
        return {"actors": [asdict(s) if is_dataclass(s) else s for s in await backend.stats()]}

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    return app
