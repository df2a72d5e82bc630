"""Candidate archive: every distinct program (or response) sampled for a task, with metadata.

Dedup is by normalized code hash per task; code text is stored once per hash for the whole
experiment, records hold only the hash. Sample counters count every record, duplicates
included (per task, and per task and `kind`), so budgets count what was drawn, not what was
new. A batch and its counters are written in one MULTI/EXEC: a job killed at any moment
either archived the whole batch and counted it, or neither. With a fence (the driver's lease
token, see store/lease.py), the transaction also aborts, writing nothing, once another
driver has taken the experiment over.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import redis

from store import keys
from store.codehash import code_hash
from store.lease import LeaseLost, watch_failed, watch_fence
from store.records import dumps, loads


class CandidateArchive:
    def __init__(self, client: redis.Redis, experiment: str, fence: tuple[str, int] | None = None):
        self.client = client
        self.experiment = experiment
        self.fence = fence  # (fence counter key, this driver's token): writes abort once it moved
        self._code = keys.exp(experiment, "code")
        self._tasks = keys.exp(experiment, "tasks")
        self._samples = keys.exp(experiment, "samples")  # task[:kind] -> samples drawn (dups included)
        self._counters = keys.exp(experiment, "counters")  # caller-defined counters (e.g. refinements per parent)

    def _cands(self, task_id: str) -> str:
        return keys.exp(self.experiment, "cands", task_id)

    def add_many(self, records: Sequence[dict[str, Any]], counters: dict[str, int] | None = None,
                  marks: dict[str, dict[str, int]] | None = None) -> list[bool]:
        """Archive records (each with "task_id" and "code"; other fields are kept as metadata),
        add `counters` (name -> amount) to the experiment's counters, and set `marks`
        (name -> {code_hash: value}, first value wins), atomically.

        Marks say which programs a scope (e.g. one search iteration) saw, whether or not an
        earlier scope archived them first.

        One round trip for the whole batch. Returns, per record, whether it was new for its
        task (False: the same normalized program was already archived there).
        """
        pipe = self.client.pipeline(transaction=True)
        if self.fence is not None:
            self._check_fence(pipe)
        for rec in records:
            if "task_id" not in rec or "code" not in rec:
                raise ValueError(f"archive record needs 'task_id' and 'code'; got keys {sorted(rec)}")
            h = code_hash(rec["code"])
            meta = {k: v for k, v in rec.items() if k != "code"} | {"code_hash": h}
            pipe.hsetnx(self._code, h, rec["code"])
            pipe.hsetnx(self._cands(rec["task_id"]), h, dumps(meta))
            pipe.hincrby(self._samples, rec["task_id"], 1)
            pipe.hincrby(self._samples, f"{rec['task_id']}:{rec.get('kind', 'sample')}", 1)
            pipe.sadd(self._tasks, rec["task_id"])
        for name, amount in (counters or {}).items():
            pipe.hincrby(self._counters, name, amount)
        for name, values in (marks or {}).items():
            for h, value in values.items():
                pipe.hsetnx(keys.exp(self.experiment, "marks", name), h, value)
        try:
            results = pipe.execute()
        except redis.WatchError as e:  # the fence moved, or the connection broke while watching
            if self.fence is None:
                raise
            raise watch_failed(self.client, self.fence, self._lost(), e) from None
        finally:
            pipe.reset()
        return [bool(results[5 * i + 1]) for i in range(len(records))]

    def _check_fence(self, pipe: redis.client.Pipeline) -> None:
        """WATCH the fence counter and check it still holds our token (then start MULTI)."""
        watch_fence(pipe, self.fence, self._lost)

    def _lost(self) -> LeaseLost:
        return LeaseLost(
            f"experiment {self.experiment!r}: this driver's lease (fencing token {self.fence[1]}) was taken "
            "over by another driver, so this write was refused and nothing of it archived. Stop this "
            "driver; the other one carries on from the archive."
        )

    def marks(self, name: str) -> dict[str, int]:
        """code_hash -> value of one mark (see add_many)."""
        raw = self.client.hgetall(keys.exp(self.experiment, "marks", name))
        return {k.decode(): int(v) for k, v in raw.items()}

    def counters(self, names: Sequence[str]) -> list[int]:
        """Current values of caller-defined counters (0 when never incremented)."""
        if not names:
            return []
        return [int(v or 0) for v in self.client.hmget(self._counters, list(names))]

    def get_task(self, task_id: str, with_code: bool = True) -> list[dict[str, Any]]:
        """All distinct candidates of a task, in no particular order."""
        records = [loads(v) for v in self.client.hvals(self._cands(task_id))]
        if with_code and records:
            codes = self.client.hmget(self._code, [r["code_hash"] for r in records])
            for rec, code in zip(records, codes, strict=True):
                rec["code"] = code.decode()
        return records

    def code(self, hashes: Iterable[str]) -> list[str | None]:
        hashes = list(hashes)
        if not hashes:
            return []
        return [None if c is None else c.decode() for c in self.client.hmget(self._code, hashes)]

    def count(self, task_id: str) -> int:
        """Distinct candidates archived for the task."""
        return int(self.client.hlen(self._cands(task_id)))

    def samples(self, task_id: str, kind: str | None = None) -> int:
        """Samples drawn for the task (of one kind, if given), duplicates included: what budgets count."""
        return int(self.client.hget(self._samples, task_id if kind is None else f"{task_id}:{kind}") or 0)

    def counts(self) -> dict[str, dict[str, int]]:
        """Per task: distinct candidates and samples drawn."""
        tasks = sorted(t.decode() for t in self.client.smembers(self._tasks))
        pipe = self.client.pipeline(transaction=False)
        for t in tasks:
            pipe.hlen(self._cands(t))
        distinct = pipe.execute()
        drawn = self.client.hmget(self._samples, tasks) if tasks else []
        return {
            t: {"distinct": int(d), "samples": int(s or 0)}
            for t, d, s in zip(tasks, distinct, drawn, strict=True)
        }
