"""A capped event stream per experiment (a Redis stream): what happened, in order."""

from __future__ import annotations

import time
from typing import Any

import redis

from store import keys
from store.records import dumps, loads

DEFAULT_MAXLEN = 10_000


class EventLog:
    def __init__(self, client: redis.Redis, experiment: str, maxlen: int = DEFAULT_MAXLEN):
        self.client = client
        self.key = keys.exp(experiment, "events")
        self.maxlen = maxlen

    def emit(self, kind: str, **fields: Any) -> str:
        """Append an event; the stream keeps about the last `maxlen` (trimmed approximately)."""
        entry = {"kind": kind, "time": time.time(), "data": dumps(fields)}
        return self.client.xadd(self.key, entry, maxlen=self.maxlen, approximate=True).decode()

    def read(self, after: str = "0-0", count: int | None = None) -> list[dict[str, Any]]:
        """Events after the given id, oldest first: {"id", "kind", "time", **fields}."""
        rows = self.client.xrange(self.key, min=f"({after}" if after != "0-0" else "-", count=count)
        return [
            {"id": rid.decode(), "kind": f[b"kind"].decode(), "time": float(f[b"time"]), **loads(f[b"data"])}
            for rid, f in rows
        ]

    def __len__(self) -> int:
        return int(self.client.xlen(self.key))
