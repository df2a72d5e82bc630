"""What a TPO run keeps in Redis so a killed job resumes: samples, verdicts, pairs, measurements.

Each phase is a hash keyed by instruction id (or one value for pairs), written batch by
batch, so a restart reads what is there and draws only what is missing. Trained versions
live in the model registry (note "<arm> iteration N"), so a restart reuses them.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from store import keys
from store.lease import fenced_pipeline


class TpoState:
    def __init__(self, client: redis.Redis, experiment: str, fence: tuple[str, int] | None = None):
        """`fence` (Store.fence_for): every write checks the driver still holds the lease."""
        self.client, self.experiment, self.fence = client, experiment, fence

    def _key(self, *parts: str) -> str:
        return keys.tpo(self.experiment, *parts)

    def get_rows(self, *parts: str) -> dict[str, Any]:
        raw = self.client.hgetall(self._key(*parts))
        return {k.decode(): json.loads(v) for k, v in raw.items()}

    def put_rows(self, rows: dict[str, Any], *parts: str) -> None:
        if rows:
            with fenced_pipeline(self.client, self.experiment, self.fence) as pipe:
                pipe.hset(self._key(*parts), mapping={k: json.dumps(v) for k, v in rows.items()})

    def get(self, *parts: str) -> Any:
        raw = self.client.get(self._key(*parts))
        return None if raw is None else json.loads(raw)

    def put(self, value: Any, *parts: str) -> None:
        with fenced_pipeline(self.client, self.experiment, self.fence) as pipe:
            pipe.set(self._key(*parts), json.dumps(value))
