"""Experiment registry: which experiments exist, their resolved configs and status."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import redis

from store import keys
from store.records import dumps, loads

Status = Literal["created", "running", "done", "failed"]
STATUSES: tuple[str, ...] = ("created", "running", "done", "failed")


@dataclass
class Experiment:
    name: str
    workload: str  # soar | scaling | tpo | ...
    config: dict[str, Any] = field(default_factory=dict)  # the resolved config
    status: Status = "created"
    created: float = 0.0
    updated: float = 0.0
    error: str = ""  # why a failed run failed ("ExceptionType: message")


class ExperimentRegistry:
    def __init__(self, client: redis.Redis):
        self.client = client

    def create(self, name: str, workload: str, config: dict[str, Any], exist_ok: bool = False) -> Experiment:
        """Register a new experiment; with exist_ok, return the existing one (resume)."""
        keys.check_name(name)
        now = time.time()
        exp = Experiment(name, workload, config, "created", now, now)
        if self.client.hsetnx(keys.experiments(), name, dumps(asdict(exp))):
            return exp
        existing = self.get(name)
        if not exist_ok:
            raise ValueError(f"experiment {name!r} already exists; pick another name or resume it")
        if existing.workload != workload:
            raise ValueError(
                f"experiment {name!r} is a {existing.workload!r} experiment, not {workload!r}"
            )
        return existing

    def get(self, name: str) -> Experiment:
        raw = self.client.hget(keys.experiments(), keys.check_name(name))
        if raw is None:
            raise KeyError(f"no experiment named {name!r}; known: {sorted(self.names())}")
        return Experiment(**loads(raw))

    def names(self) -> list[str]:
        return [n.decode() for n in self.client.hkeys(keys.experiments())]

    def list(self) -> list[Experiment]:
        return sorted(
            (Experiment(**loads(v)) for v in self.client.hvals(keys.experiments())),
            key=lambda e: e.created,
        )

    def set_status(self, name: str, status: Status, error: str = "") -> Experiment:
        if status not in STATUSES:
            raise ValueError(f"status {status!r} is not one of {STATUSES}")
        exp = self.get(name)
        exp.status, exp.updated, exp.error = status, time.time(), error
        self.client.hset(keys.experiments(), name, dumps(asdict(exp)))
        return exp
