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
in plain classes (`SamplerWorker` in search/sampler_worker.py, `Router`); the Ray actor is a
shell (`SamplerShell`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import ray

from common.faults import (
    CannotStart,
    DeadlineExceeded,
    InfrastructureError,
    is_infrastructure,
    unwrap,
)
from common.placement import LEDGER, actor_options
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
from search.weight_sync import Switch, planned_path
from store import Store
from store.models import ModelVersion

log = logging.getLogger(__name__)
SamplerActor = ray.remote(SamplerShell)  # an actor that cannot start says why, alive (SamplerShell)


@dataclass
class Slot:
    index: int
    handle: Any
    inflight: int = 0
    generation: int = 0  # bumped when the actor is replaced, so one death triggers one restart
    restarts: int = 0
    warm: bool = True  # False for a replacement until it has loaded its model
    node: str | None = None  # the Ray node of `node_of` (the handle it was asked of)
    node_of: Any = None


class Router:
    """Least-loaded slot choice with a per-slot in-flight bound; waiters queue FIFO."""

    def __init__(self, limit: int):
        self.limit = limit
        self.slots: list[Slot] = []
        # Plain futures made on the waiter's own loop: no asyncio primitive bound to one loop.
        self._waiters: deque[asyncio.Future] = deque()

    def add(self, handle: Any) -> Slot:
        slot = Slot(len(self.slots), handle)
        self.slots.append(slot)
        return slot

    def _pick(self) -> Slot | None:
        free = [s for s in self.slots if s.inflight < self.limit]
        return min(free, key=lambda s: (s.inflight, s.index)) if free else None

    async def acquire(self) -> Slot:
        while (slot := self._pick()) is None:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                # A cancelled waiter may have been handed the wake-up: pass it on.
                if waiter.done() and not waiter.cancelled():
                    self._wake()
                raise
        slot.inflight += 1
        return slot

    def release(self, slot: Slot) -> None:
        slot.inflight -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            # Set at once (not call_soon): a waiter cancelled later still sees it was woken.
            if not waiter.done() and not waiter.get_loop().is_closed():
                waiter.set_result(None)
                return

    def replace(self, slot: Slot, handle: Any) -> None:
        slot.handle = handle
        slot.generation += 1
        slot.restarts += 1
        slot.warm = False


class SamplerPool:
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
        self.router = Router(config.max_inflight_per_actor)
        for _ in range(config.num_actors):
            self.router.add(self._spawn())

    def _spawn(self) -> Any:
        return SamplerActor.options(**self._actor_options).remote(
            self.config.engine, self.config.engine_kwargs, self.checkpoint, self.version, self.files,
        )

    def _replace(self, slot: Slot, generation: int) -> None:
        if slot.generation != generation:  # another request already replaced this actor
            return
        try:
            ray.kill(slot.handle, no_restart=True)
        except Exception:  # already gone
            pass
        self.router.replace(slot, self._spawn())

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
        attempts = self.config.max_request_retries + 1
        for attempt in range(attempts):
            slot = await self.router.acquire()
            handle, generation = slot.handle, slot.generation
            ref = None
            try:
                if not slot.warm:  # a replacement loads its model first: not part of the request's deadline
                    await handle.ready.remote()
                    slot.warm = slot.warm or slot.handle is handle
                ref = handle.generate.remote(prompts, params)
                results = await self._call(ref, slot.index)
            except asyncio.CancelledError:
                # The caller went away (a closed stream): a request queued on the actor is
                # dropped, one waiting for the engine is skipped (SamplerWorker.generate).
                if ref is not None:
                    ray.cancel(ref)
                raise
            except Exception as e:
                if not is_infrastructure(e):  # the caller's mistake: its own message
                    cause = unwrap(e)  # an actor that could not start: its traceback (in e) for run.log
                    raise cause from (e if isinstance(cause, CannotStart) else None)
                self._replace(slot, generation)  # dead, OOM-killed, engine failed or hung
                if attempt == attempts - 1:
                    raise InfrastructureError(
                        f"sampler request failed on {attempts} actors in a row (last: {unwrap(e)!r}); "
                        "see the actors' logs (the Ray dashboard) for why they fail, or raise "
                        "sampler.max_request_retries / sampler.request_timeout_s"
                    ) from e
                continue
            finally:
                self.router.release(slot)
            check_counts(results, len(prompts), params.n, f"sampler actor {slot.index}")
            LEDGER.add("sampler", await self._node(slot, handle), len(prompts))
            return results
        raise AssertionError("unreachable")

    async def _node(self, slot: Slot, handle: Any) -> str | None:
        """The node of the actor that answered (asked once per actor; None if it died since)."""
        if slot.node_of is not handle:
            try:
                slot.node, slot.node_of = await handle.node_id.remote(), handle
            except Exception:  # gone right after answering: its node is unknown, the answer stands
                return None
        return slot.node

    async def _call(self, ref: Any, index: int) -> Any:
        """Await one actor call within the request deadline."""
        timeout = self.config.request_timeout_s
        try:
            return await asyncio.wait_for(ref, timeout) if timeout else await ref
        except asyncio.TimeoutError:
            raise DeadlineExceeded(f"sampler actor {index} did not answer within request_timeout_s={timeout}") from None

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
        slots = list(self.router.slots)
        outcomes = await asyncio.gather(
            *(s.handle.load.remote(checkpoint, version, files) for s in slots), return_exceptions=True,
        )
        for slot, outcome in zip(slots, outcomes, strict=True):
            if isinstance(outcome, BaseException) and is_infrastructure(outcome):  # its replacement loads it
                self._replace(slot, slot.generation)
            elif isinstance(outcome, BaseException):  # the actor's own error (CannotStart: one line)
                raise unwrap(outcome) from outcome
        return await self.ready()

    async def load_weights(self, weights_ref: Any, version: str, checkpoint: str,
                           files: dict[str, str] | None = None) -> list[str | None]:
        """Switch every actor to weights from memory, as OpenRLHF and veRL do: `weights_ref` is
        an object ref of a training job's state dict; each actor reads it from Ray's object
        store, not from disk. `checkpoint` (and its registry hashes, `files`) is the same weights
        as the registry keeps them: an actor started later (a replacement) loads that."""
        self.checkpoint, self.version, self.files = checkpoint, version, files
        slots = list(self.router.slots)
        outcomes = await asyncio.gather(
            *(s.handle.load_weights.remote(weights_ref, version, checkpoint) for s in slots), return_exceptions=True,
        )
        for slot, outcome in zip(slots, outcomes, strict=True):
            if isinstance(outcome, BaseException) and is_infrastructure(outcome):  # its replacement loads the checkpoint
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
        path = planned_path(mode, self.config.engine)
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
        for slot in self.router.slots:
            try:
                ray.kill(slot.handle, no_restart=True)
            except Exception:  # already dead
                pass
