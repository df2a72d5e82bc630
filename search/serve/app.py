"""The OpenAI-compatible FastAPI app, over any backend that samples (the pool, in production).

Kept apart from Ray Serve so the HTTP behaviour (auth, validation, error bodies) is
testable with a plain in-process backend. Every error is answered in OpenAI's error shape;
one bad request never takes the service down.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Sequence
from typing import Any, Protocol

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from common.sampling import Completion, ContextLengthError, Prompt, SamplingParams, check_counts
from search.scaling.service_search import SearchOptions, search_and_select
from search.serve.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    ReasoningSplit,
    chat_response,
    completion_response,
    error_body,
)

log = logging.getLogger("ratchet.serve")


class Backend(Protocol):
    version: str | None

    async def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]: ...


class APIError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.kind, self.param, self.code = status, kind, param, code


def build_app(backend: Backend, *, model_name: str, api_key: str | None = None,
              chat_max_tokens: int = 256, reasoning: ReasoningSplit | None = None) -> FastAPI:
    """`chat_max_tokens` is the default when a chat request sets neither max_tokens field.

    `reasoning`: a thinking model's chat answers put the thought in `reasoning_content` and
    the response in `content`; None (the default) returns the whole output as `content`.
    """
    app = FastAPI(title="ratchet", description="OpenAI-compatible sampling over ratchet's SamplerPool")

    def authorize(request: Request) -> None:
        if api_key is None:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.encode(), api_key.encode()):
            raise APIError(401, "missing or wrong API key: send the header 'Authorization: Bearer <key>'",
                           kind="authentication_error", code="invalid_api_key")

    def check_model(model: str | None) -> None:
        if model is not None and model != model_name:
            raise APIError(404, f"the model {model!r} does not exist; this server serves {model_name!r}",
                           param="model", code="model_not_found")

    def params_or_400(req: Any, max_tokens: int) -> SamplingParams:
        try:
            return req.sampling_params(max_tokens)
        except ValueError as e:
            raise APIError(400, str(e)) from e

    async def sample(prompts: list[Prompt], params: SamplingParams) -> list[list[Completion]]:
        try:
            rows = await backend.generate(prompts, params)
        except ContextLengthError as e:
            raise APIError(400, str(e), param="prompt", code="context_length_exceeded") from e
        check_counts(rows, len(prompts), params.n, "sampler backend")
        return rows

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

    @app.exception_handler(Exception)
    async def _internal(_: Request, e: Exception) -> JSONResponse:
        log.exception("request failed")
        return JSONResponse(error_body(f"internal error: {type(e).__name__}: {e}", "server_error"), status_code=500)

    @app.get("/v1/models", dependencies=[Depends(authorize)])
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [
            {"id": model_name, "object": "model", "created": int(time.time()), "owned_by": "ratchet",
             "version": backend.version},
        ]}

    @app.post("/v1/completions", dependencies=[Depends(authorize)])
    async def completions(req: CompletionRequest) -> dict[str, Any]:
        check_model(req.model)
        prompts: list[Prompt] = [req.prompt] if isinstance(req.prompt, str) else list(req.prompt)
        if not prompts:
            raise APIError(400, "prompt is an empty list: send at least one prompt", param="prompt")
        rows = await sample(prompts, params_or_400(req, req.max_tokens))
        return completion_response(model_name, rows)

    @app.post("/v1/chat/completions", dependencies=[Depends(authorize)])
    async def chat(req: ChatCompletionRequest) -> dict[str, Any]:
        check_model(req.model)
        max_tokens = next((m for m in (req.max_completion_tokens, req.max_tokens) if m is not None), chat_max_tokens)
        messages = [m.model_dump() for m in req.messages]
        if req.search is not None:
            return await searched_chat(req, messages, max_tokens)
        rows = await sample([messages], params_or_400(req, max_tokens))
        return chat_response(model_name, rows, reasoning)

    async def searched_chat(req: ChatCompletionRequest, messages: list[dict], max_tokens: int) -> dict[str, Any]:
        """Sampling-based search with self-verification: k candidates, verdicts, one answer."""

        try:
            options = SearchOptions.from_request(req.search)
        except (TypeError, ValueError) as e:
            raise APIError(400, str(e), param="search") from e
        result = await search_and_select(sample, messages, options=options, params=params_or_400(req, max_tokens))
        body = chat_response(model_name, [[result.completion]])
        body["usage"]["completion_tokens"] = result.completion_tokens  # candidates, verdicts, comparisons
        body["usage"]["total_tokens"] = body["usage"]["prompt_tokens"] + result.completion_tokens
        if req.search.get("return_candidates"):
            body["search"] = result.to_dict()
        return body

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    return app
