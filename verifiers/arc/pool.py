"""Ray shell around ArcExecutor: one actor per CPU node slice, a pool that spreads batches.

    pool = ArcVerifierPool(actors=4, workers_per_actor=2, use_cache=True)
    results = await pool.execute(task, programs)  # list[ProgramResult], in program order
    results = pool.execute_many(task, programs)   # the same, for callers without an event loop

A failed actor (dead, OOM-killed, its executor's sandboxes lost, past its deadline) is
replaced and its chunk retried (common/faults.py); an actor that cannot start for a caller's
mistake (an allowed module that is not there) fails the batch once, in one line
(`ArcVerifierShell`). Slots, replacement, retries and deadlines: common/actor_pool.py, shared
with the sampler pool.

The actor holds no logic (executor.py does, testable without Ray). It reserves one CPU
per sandbox worker, connects to the store inside itself (redis clients do not pickle) and
exchanges plain data: task JSON in, result dicts out, so nothing a program produced is
ever unpickled by the driver as an object of the sandbox's choosing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import ray

from common.actor_pool import ActorPool, Shell, Slot
from common.failpoints import failpoint
from common.placement import actor_options, check_placement, node_id
from verifiers.arc.executor import ArcExecutor
from verifiers.arc.grids import ArcTask, decode_rows
from verifiers.arc.results import InputResult, ProgramResult
from verifiers.arc.sandbox import SandboxLimits

CHUNK = 64  # programs per actor call: big enough to amortize a call, small enough to spread


class ArcVerifierActorImpl:
    """What runs inside the actor; a plain class so its wiring is testable without Ray."""

    def __init__(self, *, workers: int, limits: dict[str, Any], allowed_modules: Sequence[str],
                 use_cache: bool):
        cache = None
        if use_cache:
            from store import Store
            cache = Store.connect().exec_cache
        self.executor = ArcExecutor(workers=workers, limits=SandboxLimits(**limits),
                                    allowed_modules=allowed_modules, cache=cache)

    def execute_many(self, task_id: str, task_json: dict[str, Any],
                     programs: list[str]) -> list[dict[str, Any]]:
        task = ArcTask.from_json(task_json, task_id)
        failpoint("verifier_batch", task=task_id, programs=len(programs))  # a fault drill loses this actor with a chunk taken
        return [r.to_dict() for r in self.executor.execute_many(task, programs)]

    def stats(self) -> dict[str, Any]:
        return self.executor.stats()

    def node_id(self) -> str | None:
        """The Ray node this actor runs on: the driver credits the node with what it verified."""
        return node_id()

    def close(self) -> None:
        self.executor.close()


class ArcVerifierShell(Shell, ArcVerifierActorImpl):
    """ArcVerifierActorImpl as the pool's Ray actor runs it: alive when it cannot start, every
    call raising why (common.actor_pool.Shell), rather than dying into a lost actor that the
    pool would replace, to die the same way, max_chunk_retries times."""

    def __init__(self, **kwargs: Any):
        self._start("a verifier actor", lambda: ArcVerifierActorImpl.__init__(self, **kwargs))

    def execute_many(self, task_id: str, task_json: dict[str, Any], programs: list[str]) -> list[dict[str, Any]]:
        self._started()
        return super().execute_many(task_id, task_json, programs)

    def stats(self) -> dict[str, Any]:
        self._started()
        return super().stats()

    def close(self) -> None:
        if self._start_error is None:  # one that never started has no sandboxes to close
            super().close()


ArcVerifierActor = ray.remote(ArcVerifierShell)


def result_from_dict(d: dict[str, Any]) -> ProgramResult:
    """Inverse of ProgramResult.to_dict (for results that crossed Ray as plain data)."""
    def one(x: dict[str, Any]) -> InputResult:
        out = x.get("output")
        return InputResult(x["status"], None if out is None else decode_rows(
            ["".join(map(str, row)) for row in out]), x.get("error_type"), x.get("message"),
            x.get("correct"), x.get("shape_match"), x.get("cell_accuracy"))
    return ProgramResult(d["task_id"], d["code_hash"], tuple(map(one, d["train"])),
                         tuple(map(one, d["test"])), d.get("cached", False))


class ArcVerifierPool(ActorPool):
    """``actors`` verifier actors; a batch is cut into chunks dealt round-robin.

    The pool replaces a failed actor itself (Ray's max_restarts would be a budget for the
    actor's whole lifetime: a long job would run out of it) and retries the chunk on the next
    actor, up to ``max_chunk_retries`` times per chunk: execution is deterministic and cached,
    so a retry is safe. A chunk past ``request_timeout_s`` counts as a failure of its actor.
    """

    kind, what = "verifier", "chunk"

    def __init__(self, *, actors: int = 2, workers_per_actor: int = 1,
                 limits: SandboxLimits | None = None, allowed_modules: Sequence[str] = (),
                 use_cache: bool = True, chunk: int = CHUNK, request_timeout_s: float | None = 600.0,
                 max_chunk_retries: int = 3, scheduling_strategy: str = "DEFAULT",
                 resources: dict[str, float] | None = None):
        if actors < 1 or workers_per_actor < 1 or chunk < 1:
            raise ValueError("actors, workers_per_actor and chunk must all be >= 1")
        if max_chunk_retries < 0 or (request_timeout_s is not None and request_timeout_s <= 0):
            raise ValueError("max_chunk_retries must be >= 0 and request_timeout_s > 0 (or None)")
        check_placement("verifier", scheduling_strategy, resources or {})
        self._options = dict(num_cpus=workers_per_actor, max_restarts=0,
                             **actor_options(strategy=scheduling_strategy, resources=resources or {}))
        self._kwargs = dict(workers=workers_per_actor, limits=(limits or SandboxLimits()).__dict__.copy(),
                            allowed_modules=list(allowed_modules), use_cache=use_cache)
        self.chunk = chunk
        self.request_timeout_s = request_timeout_s
        self.max_chunk_retries = max_chunk_retries
        # chunks dealt in turn, none held back in the driver: an actor runs one at a time, Ray queues the rest
        super().__init__(actors, limit=None, round_robin=True)

    def _spawn(self) -> Any:
        return ArcVerifierActor.options(**self._options).remote(**self._kwargs)

    @property
    def actors(self) -> list[Any]:
        """The actors' handles, one per slot (a replacement takes its slot)."""
        return [s.handle for s in self.slots]

    async def execute(self, task: ArcTask, programs: Sequence[str]) -> list[ProgramResult]:
        """One ProgramResult per program, in order; chunks run on the actors concurrently."""
        task_json = ray.put(task.to_json())

        async def one(chunk: list[str]) -> list[dict[str, Any]]:
            async def attempt(slot: Slot, actor: Any) -> list[dict[str, Any]]:
                ref = actor.execute_many.remote(task.id, task_json, chunk)
                return await self._within_deadline(ref, slot, self.request_timeout_s)

            return await self._retrying(attempt, retries=self.max_chunk_retries, units=len(chunk))

        chunks = [list(programs[s:s + self.chunk]) for s in range(0, len(programs), self.chunk)]
        done = await asyncio.gather(*(one(c) for c in chunks))
        return [result_from_dict(d) for rows in done for d in rows]

    def execute_many(self, task: ArcTask, programs: Sequence[str]) -> list[ProgramResult]:
        """execute() for callers without an event loop."""
        return asyncio.run(self.execute(task, programs))

    def stats(self) -> list[dict[str, Any]]:
        return ray.get([a.stats.remote() for a in self.actors])

    def close(self) -> None:
        refs = [a.close.remote() for a in self.actors]
        try:
            ray.get(refs)
        except Exception:  # a dead actor has nothing to close
            pass
        self._kill_all()
        self.slots.clear()
