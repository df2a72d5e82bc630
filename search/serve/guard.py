"""What every request passes before the app parses it: the bearer token, then the body size.

A plain ASGI middleware (not FastAPI dependencies, which run after the body is parsed): a
request without the token is refused before one byte of its body is read, and an oversized
body (by its Content-Length, or by counting a chunked one) before the JSON parser sees it.
It guards every path but /health, so /docs and /openapi.json need the token too.

The key itself never travels: replicas get its SHA-256 (`api_key_digest`), compared in
constant time with the digest of the token a request sends.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

from common.secrets import read_secret_file, secret_from_environment
from search.serve.protocol import error_body

OPEN_PATHS = frozenset({"/health"})  # load balancers probe it without a token
API_KEY_ENV = "RATCHET_API_KEY"  # the key itself
API_KEY_FILE_ENV = "RATCHET_API_KEY_FILE"  # or a file holding it, readable by its owner only (0400/0600)


def api_key_digest(key: str) -> str:
    """What replicas hold instead of the key (a long random key makes it useless to an attacker)."""
    return hashlib.sha256(key.encode()).hexdigest()


def read_api_key_file(path: str) -> str:
    """The key in `path`, refusing a file that others could read (as Kubernetes mounts secrets 0400)."""
    return read_secret_file(path, "API key file")


def api_key_from_environment(env: Mapping[str, str] | None = None) -> str | None:
    """$RATCHET_API_KEY, else the file named by $RATCHET_API_KEY_FILE, else None."""
    return secret_from_environment(API_KEY_ENV, API_KEY_FILE_ENV, env, "API key file")


class RequestGuard:
    """ASGI middleware: token (401) then body size (413), answered in OpenAI's error shape."""

    def __init__(self, app: Any, *, api_key_sha256: str | None, max_body_bytes: int):
        self.app = app
        self.digest = api_key_sha256
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if self.digest is not None and not self._authorized(headers.get("authorization", "")):
            return await _answer(send, 401, error_body(
                "missing or wrong API key: send the header 'Authorization: Bearer <key>'",
                "authentication_error", code="invalid_api_key"))
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            return await _answer(send, 413, self._too_large(int(declared)))
        body, more, size = [], True, 0
        while more:  # read (and count) the body here, so a chunked upload is capped too
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return await _answer(send, 413, self._too_large(size))
            body.append(chunk)
            more = message.get("more_body", False)
        await self.app(scope, _replay(b"".join(body), receive), send)

    def _authorized(self, header: str) -> bool:
        scheme, _, token = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(api_key_digest(token.strip()), self.digest)

    def _too_large(self, size: int) -> dict[str, Any]:
        return error_body(f"request body of {size}+ bytes exceeds the server's limit of {self.max_body_bytes} "
                          "bytes (ServeLimits.max_body_bytes): send fewer or shorter prompts",
                          param="body", code="request_too_large")


def _replay(body: bytes, receive: Any) -> Any:
    """A receive that hands the app the body already read, then defers to the client's (disconnects)."""
    sent = False

    async def replay() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _answer(send: Any, status: int, body: dict[str, Any]) -> None:
    payload = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})
