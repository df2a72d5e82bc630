"""Ray shell around ArcExecutor: one actor per CPU node slice, a pool that spreads batches.

    pool = ArcVerifierPool(actors=4, workers_per_actor=2, use_cache=True)
    refs = pool.submit(task, programs)          # ObjectRefs, one per chunk (returns at once)
    results = pool.collect(refs)                # list[ProgramResult], in program order
    results = pool.execute_many(task, programs) # both steps

The actor holds no logic (executor.py does, testable without Ray). It reserves one CPU
per sandbox worker, connects to the store inside itself (redis clients do not pickle) and
exchanges plain data: task JSON in, result dicts out, so nothing a program produced is
ever unpickled by the driver as an object of the sandbox's choosing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ray

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
    """``actors`` verifier actors; a batch is cut into chunks dealt round-robin."""

    def __init__(self, *, actors: int = 2, workers_per_actor: int = 1,
                 limits: SandboxLimits | None = None, allowed_modules: Sequence[str] = (),
                 use_cache: bool = True, chunk: int = CHUNK):
        if actors < 1 or workers_per_actor < 1 or chunk < 1:
            raise ValueError("actors, workers_per_actor and chunk must all be >= 1")
        limits_dict = (limits or SandboxLimits()).__dict__.copy()
        # max_restarts: an actor lost with its node comes back; calls in flight are retried
        # once (execution is deterministic and cached, so a retry is safe).
        self.actors = [
            ArcVerifierActor.options(num_cpus=workers_per_actor, max_restarts=2,
                                     max_task_retries=1).remote(
                workers=workers_per_actor, limits=limits_dict,
                allowed_modules=list(allowed_modules), use_cache=use_cache)
            for _ in range(actors)]
        self.chunk = chunk
        self._next = 0

    def submit(self, task: ArcTask, programs: Sequence[str]) -> list[ray.ObjectRef]:
        """Returns at once: one ObjectRef per chunk, each resolving to a list of dicts."""
        task_json = ray.put(task.to_json())
        refs = []
        for start in range(0, len(programs), self.chunk):
            actor = self.actors[self._next % len(self.actors)]
            self._next += 1
            refs.append(actor.execute_many.remote(task.id, task_json,
                                                  list(programs[start:start + self.chunk])))
        return refs

    @staticmethod
    def collect(refs: Sequence[ray.ObjectRef]) -> list[ProgramResult]:
        return [result_from_dict(d) for chunk in ray.get(list(refs)) for d in chunk]

    def execute_many(self, task: ArcTask, programs: Sequence[str]) -> list[ProgramResult]:
        return self.collect(self.submit(task, programs))

    def stats(self) -> list[dict[str, Any]]:
        return ray.get([a.stats.remote() for a in self.actors])

    def close(self) -> None:
        ray.get([a.close.remote() for a in self.actors])
        for a in self.actors:
            ray.kill(a)
        self.actors = []
