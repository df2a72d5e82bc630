"""SamplerPool: Ray actors, one engine each, behind one async API that loses nothing.

    pool = SamplerPool(PoolConfig(engine="transformers", num_actors=2, experiment="demo"))
    await pool.ready()
    await pool.load("v3")                                 # every actor, via the model registry
    await pool.switch(version, weights_ref)               # after a training: from memory or disk (weight_sync)
    async for i, completions in pool.stream(prompts, SamplingParams(n=8)):
        ...                                               # results as they complete

Routing is least-loaded with at most `max_inflight_per_actor` requests per actor; callers
beyond that wait in the driver (backpressure, nothing piles up inside actors). Every request
has a deadline (`request_timeout_s`). An actor that fails (it died, Ray's memory monitor
killed it, its engine failed inside it, or it missed a deadline: common/faults.py) is
replaced, and its requests are retried on the pool's live actors; a caller's mistake (a
prompt too long) is raised as it is, and so is an actor that cannot start for one (a missing
package, a bad engine argument: `CannotStart`, never retried on fresh actors). The logic lives
in plain classes (`SamplerWorker` in search/sampler_worker.py; slots, routing, replacement,
retries and deadlines in common/actor_pool.py, which the ARC verifier pool shares); the Ray
actor is a shell (`SamplerShell`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import ray

from common.actor_pool import ActorPool, Router, Slot  # noqa: F401 (Router re-exported)
from common.faults import is_infrastructure, unwrap
from common.placement import actor_options
from common.sampling import Completion, Prompt, SamplingParams, check_counts
from search.pool_config import PoolConfig
from search.sampler_worker import (  # noqa: F401 (re-exported)
    CONTROL_THREADS,
    ActorStats,
    SamplerShell,
    SamplerWorker,
    _cancelled,
    freeze_heap,
)
from search.weight_sync import Switch
from store import Store
from store.models import ModelVersion

log = logging.getLogger(__name__)
SamplerActor = ray.remote(SamplerShell)  # an actor that cannot start says why, alive (SamplerShell)


class SamplerPool(ActorPool):
    kind, what = "sampler", "request"
    advice = ("see the actors' logs (the Ray dashboard) for why they fail, or raise "
              "sampler.max_request_retries / sampler.request_timeout_s")

    def __init__(self, config: PoolConfig, *, checkpoint: str | None = None, version: str | None = None,
                 files: dict[str, str] | None = None):
        """Start the actors (returns at once; `await ready()` waits for them to load). `files`
        (a registry version's hashes): every actor checks them before loading `checkpoint`."""
        if not ray.is_initialized():
            raise RuntimeError("Ray is not initialised: call ray.init() (or ray.init(address='auto')) first")
        self.config = config
        self.checkpoint = checkpoint
        self.version = version
        self.files = files  # the loaded version's file hashes, checked by replacements too
        gpus = config.num_gpus_per_actor
        if gpus is None:
            gpus = 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0
        self._actor_options = dict(
            num_cpus=config.num_cpus_per_actor, num_gpus=gpus,
            max_concurrency=config.max_inflight_per_actor + CONTROL_THREADS,
            # The pool replaces dead actors itself (with the current checkpoint) and retries
            # their requests; Ray's own restart would reload the checkpoint the actor began with.
            max_restarts=0,
            **actor_options(strategy=config.scheduling_strategy, resources=config.resources),
        )
        if config.niceness is not None:  # merged with the job's runtime_env (its env_vars too)
            self._actor_options["runtime_env"] = {"env_vars": {"RAY_worker_niceness": str(config.niceness)}}
        super().__init__(config.num_actors, limit=config.max_inflight_per_actor)

    def _spawn(self) -> Any:
        return SamplerActor.options(**self._actor_options).remote(
            self.config.engine, self.config.engine_kwargs, self.checkpoint, self.version, self.files,
        )

    async def ready(self) -> list[str | None]:
        """Wait until every actor has loaded its model; returns their versions. An actor lost
        meanwhile is replaced (up to max_request_retries times per slot)."""

        async def one(slot: Slot) -> str | None:
            for attempt in range(self.config.max_request_retries + 1):
                handle, generation = slot.handle, slot.generation
                try:
                    version = await handle.ready.remote()
                except Exception as e:
                    if not is_infrastructure(e):  # CannotStart: a fresh actor would fail the same way
                        raise unwrap(e) from e
                    if attempt == self.config.max_request_retries:
                        raise
                    self._replace(slot, generation)
                    continue
                slot.warm = slot.warm or slot.handle is handle
                return version
            raise AssertionError("unreachable")

        return list(await asyncio.gather(*(one(s) for s in self.router.slots)))

    async def context_length(self) -> int | None:
        """The smallest context of the actors' models (None when no engine knows its own)."""
        lengths = await asyncio.gather(*(s.handle.context_length.remote() for s in self.router.slots))
        return min((n for n in lengths if n), default=None)

    async def submit(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        """One request on one actor: params.n completions per prompt. Survives actor failures."""
        prompts = list(prompts)

        async def attempt(slot: Slot, handle: Any) -> list[list[Completion]]:
            ref = None
            try:
                if not slot.warm:  # a replacement loads its model first: not part of the request's deadline
                    await handle.ready.remote()
                    slot.warm = slot.warm or slot.handle is handle
                ref = handle.generate.remote(prompts, params)
                results = await self._within_deadline(ref, slot, self.config.request_timeout_s)
            except asyncio.CancelledError:
                # The caller went away (a closed stream): a request queued on the actor is
                # dropped, one waiting for the engine is skipped (SamplerWorker.generate).
                if ref is not None:
                    ray.cancel(ref)
                raise
            check_counts(results, len(prompts), params.n, f"sampler actor {slot.index}")
            return results

        return await self._retrying(attempt, retries=self.config.max_request_retries, units=len(prompts))

    def _chunks(self, prompts: Sequence[Prompt], size: int | None) -> list[tuple[int, list[Prompt]]]:
        size = size or self.config.prompts_per_request
        return [(s, list(prompts[s : s + size])) for s in range(0, len(prompts), size)]

    async def stream(
        self, prompts: Sequence[Prompt], params: SamplingParams, *, prompts_per_request: int | None = None,
    ) -> AsyncIterator[tuple[int, list[Completion]]]:
        """Yield (prompt index, its n completions) as requests complete, in completion order."""

        async def run(start: int, chunk: list[Prompt]) -> tuple[int, list[list[Completion]]]:
            return start, await self.submit(chunk, params)

        tasks = [asyncio.ensure_future(run(s, c)) for s, c in self._chunks(prompts, prompts_per_request)]
        try:
            for next_done in asyncio.as_completed(tasks):
                start, rows = await next_done
                for k, row in enumerate(rows):
                    yield start + k, row
        finally:
            for t in tasks:  # a caller that stops early leaves nothing running
                t.cancel()

    async def generate(
        self, prompts: Sequence[Prompt], params: SamplingParams, *, prompts_per_request: int | None = None,
    ) -> list[list[Completion]]:
        """All results in prompt order (requests spread over the actors)."""
        results: list[list[Completion]] = [[] for _ in prompts]
        async for i, row in self.stream(prompts, params, prompts_per_request=prompts_per_request):
            results[i] = row
        check_counts(results, len(prompts), params.n, "sampler pool")
        return results

    def generate_sync(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        """generate() for callers without an event loop."""
        return asyncio.run(self.generate(prompts, params))

    async def load_checkpoint(self, checkpoint: str, version: str | None = None,
                              files: dict[str, str] | None = None) -> list[str | None]:
        """Switch every actor to `checkpoint`; completions from then on carry `version`.

        `files` (a registry version's hashes): each actor checks them before loading."""
        self.checkpoint, self.version, self.files = checkpoint, version, files  # replacements start on it too
        return await self._load_all(lambda handle: handle.load.remote(checkpoint, version, files))

    async def load_weights(self, weights_ref: Any, version: str, checkpoint: str,
                           files: dict[str, str] | None = None) -> list[str | None]:
        """Switch every actor to weights from memory, as OpenRLHF and veRL do: `weights_ref` is
        an object ref of a training job's state dict; each actor reads it from Ray's object
        store, not from disk. `checkpoint` (and its registry hashes, `files`) is the same weights
        as the registry keeps them: an actor started later (a replacement) loads that."""
        self.checkpoint, self.version, self.files = checkpoint, version, files  # a replacement loads the checkpoint
        return await self._load_all(lambda handle: handle.load_weights.remote(weights_ref, version, checkpoint))

    async def _load_all(self, load: Callable[[Any], Any]) -> list[str | None]:
        """`load(handle)` (an object ref) on every actor, then ready(): an actor lost meanwhile is
        replaced, and its replacement starts on the pool's checkpoint, set before."""
        slots = list(self.router.slots)
        outcomes = await asyncio.gather(*(load(s.handle) for s in slots), return_exceptions=True)
        for slot, outcome in zip(slots, outcomes, strict=True):
            if isinstance(outcome, BaseException) and is_infrastructure(outcome):  # its replacement loads it
                self._replace(slot, slot.generation)
            elif isinstance(outcome, BaseException):  # the actor's own error (CannotStart: one line)
                raise unwrap(outcome) from outcome
        return await self.ready()

    async def switch(self, version: ModelVersion, weights: Any = None) -> Switch:
        """Switch every actor to a newly trained registry `version`, by the path
        `config.weight_sync` picks (search/weight_sync.py): `weights` (an object ref of its
        state dict, or None) in memory, or its checkpoint. `auto` falls back to the checkpoint
        when the in-memory load fails (weights that do not fit the model, an engine without
        load_weights); `memory` raises. Every actor must then serve `version`, or it raises."""
        mode, started, note = self.config.weight_sync, time.perf_counter(), ""
        path = self.config.sync_path
        if path == "memory" and weights is None:
            path, note = "disk", "no weights in memory: trained before a restart, or too large for the object store"
        if path == "memory":
            try:
                versions = await self.load_weights(weights, version.version, version.checkpoint, version.files)
            except Exception as e:
                if mode == "memory":
                    raise unwrap(e) from e  # the actor's own error: weights that do not fit, say
                path, note = "disk", f"the in-memory load failed: {unwrap(e)}"
                log.warning("sampler.weight_sync=auto: %s; loading %s from its checkpoint", note, version.version)
        if path == "disk":
            versions = await self.load_checkpoint(version.checkpoint, version.version, version.files)
        stale = [v for v in versions if v != version.version]
        if stale:  # never serve an old model under a switch that reported success
            raise RuntimeError(f"after switching to {version.version}, actors serve {stale}: see their logs")
        return Switch(version.version, path, round(time.perf_counter() - started, 3), note)

    async def load(self, version: str | None = None) -> Any:
        """Switch every actor to a registry version (None: the current one); returns its ModelVersion."""
        if not self.config.experiment:
            raise ValueError("PoolConfig.experiment is not set: set it to load registry versions, "
                             "or call load_checkpoint(path)")

        registry = Store.connect().models(self.config.experiment)
        mv = registry.get(version) if version else registry.current()
        if mv is None:
            raise ValueError(f"experiment {self.config.experiment!r} has no current model version; publish one first")
        await self.load_checkpoint(mv.checkpoint, mv.version, mv.files)
        return mv

    async def stats(self) -> list[ActorStats]:
        slots = list(self.router.slots)
        raw = await asyncio.gather(*(s.handle.stats.remote() for s in slots), return_exceptions=True)
        out = []
        for slot, r in zip(slots, raw, strict=True):
            if isinstance(r, BaseException):  # a dead actor reports nothing until replaced
                r = dict(version=None, busy_s=0.0, tokens_generated=0, requests=0, running=0, cancelled=0,
                         niceness=None)
            out.append(ActorStats(index=slot.index, queue_depth=slot.inflight, restarts=slot.restarts, **r))
        return out

    def shutdown(self) -> None:
        self._kill_all()
