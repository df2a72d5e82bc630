"""Redis-backed durable state shared by every ratchet job and actor.

    from store import Store
    store = Store.connect()            # $RATCHET_REDIS_URL, or the machine's local server
    store.experiments.create("demo", "soar", config)
    store.models("demo").publish("/ckpt/v1", parent="v0", metrics={...})
"""

from __future__ import annotations

from dataclasses import dataclass, field

import redis

from store.archive import CandidateArchive
from store.codehash import code_hash, content_hash, normalize_code
from store.connection import StoreUnavailable, connect, redact, resolve_url
from store.events import EventLog
from store.exec_cache import ExecutionCache
from store.experiments import ConfigChanged, Experiment, ExperimentRegistry
from store.lease import (
    Lease,
    LeaseHeld,
    LeaseLost,
    Leases,
    WriteUnconfirmed,
    fence_key,
    fenced_pipeline,
)
from store.models import ModelRegistry, ModelVersion


@dataclass
class Store:
    """One client and the registries on it. Create one per process/actor (not picklable)."""

    client: redis.Redis
    fences: dict[str, int] = field(default_factory=dict)  # experiment -> this driver's lease token

    @classmethod
    def connect(cls, url: str | None = None) -> Store:
        return cls(connect(url))

    @property
    def experiments(self) -> ExperimentRegistry:
        return ExperimentRegistry(self.client)

    @property
    def exec_cache(self) -> ExecutionCache:
        return ExecutionCache(self.client)

    def models(self, experiment: str) -> ModelRegistry:
        return ModelRegistry(self.client, experiment, self._fence_for(experiment))

    def leases(self, experiment: str) -> Leases:
        return Leases(self.client, experiment)

    def fence(self, lease: Lease) -> None:
        """From now on, archive writes and model publishing of the lease's experiment (and of
        its `<name>.*` namespaces: evaluation runs, controls) abort once another driver takes
        the lease."""
        self.fences[lease.experiment] = lease.token

    def archive(self, experiment: str) -> CandidateArchive:
        return CandidateArchive(self.client, experiment, self._fence_for(experiment))

    def fence_for(self, experiment: str) -> tuple[str, int] | None:
        """(fence counter key, token) guarding `experiment`'s writes, or None when unfenced;
        pass it to store.lease.fenced_pipeline for writes outside the archive and registry."""
        return self._fence_for(experiment)

    def _fence_for(self, experiment: str) -> tuple[str, int] | None:
        owner = next((e for e in self.fences if experiment == e or experiment.startswith(f"{e}.")), None)
        return None if owner is None else (fence_key(owner), self.fences[owner])

    def events(self, experiment: str) -> EventLog:
        return EventLog(self.client, experiment)


__all__ = [
    "CandidateArchive", "ConfigChanged", "EventLog", "Lease", "LeaseHeld", "LeaseLost", "Leases", "WriteUnconfirmed", "ExecutionCache", "Experiment", "ExperimentRegistry",
    "ModelRegistry", "ModelVersion", "Store", "StoreUnavailable", "code_hash", "connect",
    "content_hash", "fenced_pipeline", "normalize_code", "redact", "resolve_url",
]
