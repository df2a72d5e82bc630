"""The OpenAI-compatible FastAPI app, over any backend that samples (the pool, in production).

Kept apart from Ray Serve so the HTTP behaviour (auth, validation, limits, streaming, error
bodies) is testable with a plain in-process backend. Every error is answered in OpenAI's
error shape; one bad request never takes the service down. A request passes, in order: the
token and the body size (guard.py, before parsing), parsing, the fields ratchet cannot
honour (a 400 naming them, protocol.py), the caps (limits.py), then the pool; `stream=true`
answers with server-sent events (streaming.py).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, is_dataclass
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
from search.serve.service_search import SearchOptions, search_and_select
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


def build_app(backend: Backend, *, model_name: str, aliases: Sequence[str] = (), api_key: str | None = None,
              api_key_sha256: str | None = None, limits: ServeLimits | None = None, chat_max_tokens: int = 256,
              reasoning: ReasoningSplit | None = None) -> FastAPI:
    """`model_name`: the id /v1/models lists first and responses carry; `aliases`: other ids the
    model answers to (listed after it, as vLLM lists its served names).

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

    def check_model(model: str | None) -> None:
        if model is not None and model not in names:
            served = repr(model_name) if len(names) == 1 else f"{model_name!r} (also named {names[1:]})"
            raise APIError(404, f"the model {model!r} does not exist; this server serves {served}",
                           param="model", code="model_not_found")

    def params_or_400(req: CompletionRequest | ChatCompletionRequest, max_tokens: int) -> SamplingParams:
        check_model(req.model)
        req.refuse_unsupported()
        check_request(req, max_tokens, limits, getattr(backend, "context_length", None))
        try:
            return req.sampling_params(max_tokens)
        except ValueError as e:
            raise APIError(400, str(e)) from e

    async def sample(prompts: list[Prompt], params: SamplingParams) -> list[list[Completion]]:
        try:
            rows = await backend.generate(prompts, params)
        except Exception as e:
            api = backend_error(e)
            if api is None:
                raise
            raise api from e
        check_counts(rows, len(prompts), params.n, "sampler backend")
        return rows

    async def streamed(prompts: list[Prompt], params: SamplingParams, events: Any) -> StreamingResponse:
        try:
            rows = await with_first(backend.stream(prompts, params))
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
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": int(time.time()), "owned_by": "ratchet",
             "version": backend.version} for name in names
        ]}

    @app.post("/v1/completions", response_model=None)
    async def completions(req: CompletionRequest) -> dict[str, Any] | StreamingResponse:
        prompts: list[Prompt] = [req.prompt] if isinstance(req.prompt, str) else list(req.prompt)
        if not prompts:
            raise APIError(400, "prompt is an empty list: send at least one prompt", param="prompt")
        params = params_or_400(req, req.max_tokens)
        if req.stream:
            return await streamed(prompts, params, lambda rows: completion_events(
                rows, model=model_name, n=params.n, include_usage=req.include_usage))
        return completion_response(model_name, await sample(prompts, params))

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(req: ChatCompletionRequest) -> dict[str, Any] | StreamingResponse:
        max_tokens = next((m for m in (req.max_completion_tokens, req.max_tokens) if m is not None), chat_max_tokens)
        params = params_or_400(req, max_tokens)
        messages = req.prompt_messages()
        if req.search is not None:
            return await searched_chat(req, messages, params)
        if req.stream:
            return await streamed([messages], params, lambda rows: chat_events(
                rows, model=model_name, include_usage=req.include_usage, reasoning=reasoning))
        return chat_response(model_name, await sample([messages], params), reasoning)

    async def searched_chat(req: ChatCompletionRequest, messages: list[dict], params: SamplingParams) -> dict[str, Any]:
        """Sampling-based search with self-verification: k candidates, verdicts, one answer."""

        try:
            options = SearchOptions.from_request(req.search)
        except (TypeError, ValueError) as e:
            raise APIError(400, str(e), param="search") from e
        result = await search_and_select(sample, messages, options=options, params=params)
        body = chat_response(model_name, [[result.completion]])
        body["usage"]["completion_tokens"] = result.completion_tokens  # candidates, verdicts, comparisons
        body["usage"]["total_tokens"] = body["usage"]["prompt_tokens"] + result.completion_tokens
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
