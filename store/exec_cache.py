"""Execution cache: (task fingerprint, normalized code hash) -> execution result.

Shared by every experiment: a result depends only on the task's inputs and the program.
The fingerprint must also cover whatever changes results (the verifier's limits/version).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import redis

from store import keys
from store.records import dumps, loads


class ExecutionCache:
    def __init__(self, client: redis.Redis):
        self.client = client
        self.hits = 0
        self.misses = 0

    def get_many(self, items: Sequence[tuple[str, str]]) -> list[dict[str, Any] | None]:
        """Results for (task_fingerprint, code_hash) pairs, None where not cached; one round trip."""
        if not items:
            return []
        by_task: dict[str, list[int]] = defaultdict(list)
        for i, (fp, _) in enumerate(items):
            by_task[fp].append(i)
        pipe = self.client.pipeline(transaction=False)
        for fp, idx in by_task.items():
            pipe.hmget(keys.exec_cache(fp), [items[i][1] for i in idx])
        out: list[dict[str, Any] | None] = [None] * len(items)
        for (_, idx), values in zip(by_task.items(), pipe.execute(), strict=True):
            for i, raw in zip(idx, values, strict=True):
                out[i] = loads(raw)
        found = sum(r is not None for r in out)
        self.hits += found
        self.misses += len(items) - found
        return out

    def set_many(self, items: Sequence[tuple[str, str, dict[str, Any]]]) -> None:
        """Store results for (task_fingerprint, code_hash, result) triples; one round trip."""
        if not items:
            return
        by_task: dict[str, dict[str, bytes]] = defaultdict(dict)
        for fp, h, result in items:
            by_task[fp][h] = dumps(result)
        pipe = self.client.pipeline(transaction=False)
        for fp, mapping in by_task.items():
            pipe.hset(keys.exec_cache(fp), mapping=mapping)
        pipe.execute()
