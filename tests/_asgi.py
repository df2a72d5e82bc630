"""Drive an ASGI app by hand, where a test client cannot: a client that disconnects mid-request."""

from __future__ import annotations

import asyncio
import json
from typing import Any


async def post_then_disconnect(app: Any, path: str, body: dict[str, Any], gone: asyncio.Event) -> list[dict]:
    """POST `body` as JSON to `path`; the client disconnects once `gone` is set. Returns what the
    app sent (the response's start and body messages)."""
    raw = json.dumps(body).encode()
    messages = [{"type": "http.request", "body": raw, "more_body": False}]
    sent: list[dict] = []

    async def receive() -> dict:
        if messages:
            return messages.pop(0)
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    await app(scope, receive, send)
    return sent
