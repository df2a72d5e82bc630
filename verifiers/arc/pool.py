"""Ray shell around ArcExecutor: one actor per CPU node slice, a pool that spreads batches.

    pool = ArcVerifierPool(actors=4, workers_per_actor=2, use_cache=True)
    results = await pool.execute(task, programs)  # list[ProgramResult], in program order
    results = pool.execute_many(task, programs)   # the same, for callers without an event loop

A failed actor (dead, OOM-killed, its executor's sandboxes lost, past its deadline) is
replaced and its chunk retried (common/faults.py).

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

from common.faults import DeadlineExceeded, InfrastructureError, is_infrastructure, unwrap
from common.placement import LEDGER, actor_options, check_placement, node_id
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
        return [r.to_dict() for r in self.executor.execute_many(task, programs)]

    def stats(self) -> dict[str, Any]:
        return self.executor.stats()

    def node_id(self) -> str | None:
        """The Ray node this actor runs on: the driver credits the node with what it verified."""
        return node_id()

    def close(self) -> None:
        self.executor.close()


ArcVerifierActor = ray.remote(ArcVerifierActorImpl)


def result_from_dict(d: dict[str, Any]) -> ProgramResult:
    """Inverse of ProgramResult.to_dict (for results that crossed Ray as plain data)."""
    def one(x: dict[str, Any]) -> InputResult:
        out = x.get("output")
        return InputResult(x["status"], None if out is None else decode_rows(
            ["".join(map(str, row)) for row in out]), x.get("error_type"), x.get("message"),
            x.get("correct"), x.get("shape_match"), x.get("cell_accuracy"))
    return ProgramResult(d["task_id"], d["code_hash"], tuple(map(one, d["train"])),
                         tuple(map(one, d["test"])), d.get("cached", False))


class ArcVerifierPool:
    """``actors`` verifier actors; a batch is cut into chunks dealt round-robin.

    The pool replaces a failed actor itself (Ray's max_restarts would be a budget for the
    actor's whole lifetime: a long job would run out of it) and retries the chunk on the next
    actor, up to ``max_chunk_retries`` times per chunk: execution is deterministic and cached,
    so a retry is safe. A chunk past ``request_timeout_s`` counts as a failure of its actor.
    """

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
        self.actors = [self._spawn() for _ in range(actors)]
        self.chunk = chunk
        self.request_timeout_s = request_timeout_s
        self.max_chunk_retries = max_chunk_retries
        self.restarts = 0  # actors replaced after a failure
        self._next = 0
        self._nodes: dict[Any, str | None] = {}  # actor handle -> its node (asked once)

    def _spawn(self) -> Any:
        return ArcVerifierActor.options(**self._options).remote(**self._kwargs)

    def _replace(self, index: int, actor: Any) -> None:
        if self.actors[index] is not actor:  # another chunk already replaced it
            return
        try:
            ray.kill(actor, no_restart=True)
        except Exception:  # already gone
            pass
        self.actors[index] = self._spawn()
        self.restarts += 1

    async def _credit(self, actor: Any, programs: int) -> None:
        """Count a chunk for the node of the actor that answered it (common/placement.py)."""
        if actor not in self._nodes:
            try:
                self._nodes[actor] = await actor.node_id.remote()
            except Exception:  # gone right after answering: its node is unknown, the results stand
                self._nodes[actor] = None
        LEDGER.add("verifier", self._nodes[actor], programs)

    async def execute(self, task: ArcTask, programs: Sequence[str]) -> list[ProgramResult]:
        """One ProgramResult per program, in order; chunks run on the actors concurrently."""
        task_json = ray.put(task.to_json())

        async def one(chunk: list[str]) -> list[dict[str, Any]]:
            attempts = self.max_chunk_retries + 1
            for attempt in range(attempts):
                index = self._next % len(self.actors)
                self._next += 1
                actor = self.actors[index]
                try:
                    ref = actor.execute_many.remote(task.id, task_json, chunk)
                    try:
                        rows = await (ref if self.request_timeout_s is None
                                      else asyncio.wait_for(ref, self.request_timeout_s))
                    except asyncio.TimeoutError:
                        raise DeadlineExceeded(f"verifier actor {index} did not answer within "
                                               f"request_timeout_s={self.request_timeout_s}") from None
                    await self._credit(actor, len(chunk))
                    return rows
                except Exception as e:
                    if not is_infrastructure(e):
                        raise unwrap(e) from None
                    self._replace(index, actor)
                    if attempt == attempts - 1:
                        raise InfrastructureError(
                            f"verifier chunk failed on {attempts} actors in a row (last: {unwrap(e)!r}); "
                            "see the actors' logs for why they fail") from e
            raise AssertionError("unreachable")

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
        for a in self.actors:
            ray.kill(a)
        self.actors = []
