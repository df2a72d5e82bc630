"""SamplerWorker: what runs inside each sampler actor (one engine and its counters).

A plain class, testable without Ray; search/pool.py wraps it in a Ray actor (`SamplerActor`)
and routes requests to it. It loads checkpoints (files checked against the registry's
hashes) or weights handed over in memory, generates, counts, and reports its stats.

An engine that can serve several requests in one call (`generate_many`: vLLM) gets them
together: requests that arrive while it generates wait, and the next call takes all of them
(one of the waiting threads leads it; the others wait for their results). vLLM decodes their
sequences in one batch, which on a CPU is 3-5x the throughput of one request at a time
(docs/vllm-cpu.md). The pool's `max_inflight_per_actor` bounds how many can gather.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import TaskCancelledError

from common.actor_pool import Shell
from common.failpoints import failpoint
from common.faults import EngineFailed
from common.logs import protect
from common.placement import node_id
from common.redaction import secret_values
from common.sampling import Completion, Prompt, SamplingParams
from common.secrets import resolve_secret_refs
from search.engines import make_engine
from store.models import verify_files

# Threads an actor keeps beyond its generate slots, so stats() and load() answer while it works.
CONTROL_THREADS = 2
# How often a request waiting for its batch looks whether its caller went away (ray.cancel).
CANCEL_CHECK_S = 1.0
# How long a batch's leader waits for more requests before it calls the engine (Ray Serve's
# batch_wait_timeout_s): callers whose requests just came back send their next ones within it,
# so they join one call instead of one running alone and the rest after it (bench_engines --levers).
BATCH_WAIT_S = 0.05


@dataclass
class _Request:
    """One generate call waiting to be served in a batch."""

    prompts: Sequence[Prompt]
    params: SamplingParams
    done: bool = False
    result: Any = None  # its completions, or the exception to raise in its caller's thread


class Coalescer:
    """Hands the requests that gather while the engine is busy to it in one call.

    The first waiting thread to find the engine free leads: it takes every pending request,
    calls `run_many` on them outside the lock, and hands each its result. Without Ray threads
    (plain use) it serves each request alone, as a lock would."""

    def __init__(self, run_many: Callable[[list[_Request]], None], cancelled: Callable[[], bool],
                 wait_s: float = 0.0):
        self.run_many = run_many
        self.cancelled = cancelled
        self.wait_s = wait_s
        self._cond = threading.Condition()
        self._pending: list[_Request] = []
        self._busy = False
        self.batches: list[int] = []  # requests per engine call, for stats and tests

    def submit(self, prompts: Sequence[Prompt], params: SamplingParams) -> Any:
        request = _Request(prompts, params)
        with self._cond:
            self._pending.append(request)
            self._cond.notify_all()  # waiters look again whether their callers went away
            while self._busy and not request.done:
                self._cond.wait(CANCEL_CHECK_S)
                if not request.done and request in self._pending and self.cancelled():
                    self._pending.remove(request)  # its caller went away before its batch began
                    raise TaskCancelledError()
            if not request.done:
                self._busy = True
                deadline = time.monotonic() + self.wait_s  # others arriving now join this call
                while (left := deadline - time.monotonic()) > 0:
                    self._cond.wait(left)
                batch, self._pending = self._pending, []
        if not request.done:  # this thread leads the batch
            try:
                self.run_many(batch)
            finally:
                with self._cond:
                    self.batches.append(len(batch))
                    for r in batch:
                        r.done = True
                    self._busy = False
                    self._cond.notify_all()
        if isinstance(request.result, BaseException):
            raise request.result
        return request.result


@dataclass
class ActorStats:
    index: int  # slot in the pool (a restarted actor keeps its slot)
    version: str | None  # model version loaded
    busy_s: float  # seconds spent generating
    tokens_generated: int
    requests: int  # generate calls served
    running: int  # generate calls executing now (one engine call; several requests where it coalesces them)
    cancelled: int  # generate calls skipped because their caller had gone (ray.cancel) before they began
    queue_depth: int  # requests sent to this actor and not yet answered
    restarts: int  # times this slot's actor was replaced after dying
    niceness: int | None  # the actor process's scheduling niceness (PoolConfig.niceness); None: the actor is dead
    engine: dict[str, Any] = field(default_factory=dict)  # the engine's own stats(), if it has any (prefix cache)


class SamplerWorker:
    """One engine plus its counters; what runs inside each actor (testable without Ray)."""

    def __init__(self, engine: str, engine_kwargs: dict[str, Any], checkpoint: str | None, version: str | None,
                 files: dict[str, str] | None = None):
        engine_kwargs = resolve_secret_refs(engine_kwargs)  # api_key_env/_file: the key is read here, in the actor
        protect(secret_values(engine_kwargs))  # an endpoint's api_key: never in this actor's log lines
        self._attach(make_engine(engine, **engine_kwargs))
        if checkpoint is not None:
            verify_files(checkpoint, files or {}, what=f"model version {version}")
            self.engine.load(checkpoint, version)
        freeze_heap()

    @classmethod
    def around(cls, engine: Any) -> SamplerWorker:
        """A worker around an engine already running (a benchmark's), as the actor would hold it."""
        worker = cls.__new__(cls)
        worker._attach(engine)
        return worker

    def _attach(self, engine: Any) -> None:
        self.engine = engine
        self._generate_lock = threading.Lock()  # one generation at a time: it uses every core/the GPU
        self._stats_lock = threading.Lock()
        many = getattr(engine, "generate_many", None)
        self._coalescer = Coalescer(self._generate_batch, _cancelled, BATCH_WAIT_S) if callable(many) else None
        self.busy_s = 0.0
        self.tokens_generated = 0
        self.requests = 0
        self.running = 0
        self.cancelled = 0

    def ready(self) -> str | None:
        return self.engine.version

    def context_length(self) -> int | None:
        return self.engine.context_length

    def node_id(self) -> str | None:
        """The Ray node this actor runs on: the driver credits the node with what it served."""
        return node_id()

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        if self._coalescer is not None:
            try:
                results = self._coalescer.submit(prompts, params)
            except TaskCancelledError:
                with self._stats_lock:
                    self.cancelled += 1
                raise
        else:
            with self._generate_lock:
                if _cancelled():  # its caller went away while it waited for the engine: skip it
                    with self._stats_lock:
                        self.cancelled += 1
                    raise TaskCancelledError()
                results = self._run(lambda: self.engine.generate(prompts, params), 1)
        failpoint("sampler_batch", prompts=len(prompts))  # a fault drill loses this actor with a batch done, unsent
        with self._stats_lock:
            self.requests += 1
            self.tokens_generated += sum(c.completion_tokens for row in results for c in row)
        return results

    def _generate_batch(self, batch: list[_Request]) -> None:
        """One engine call for the gathered requests; each gets its completions or its own error."""
        with self._generate_lock:
            try:
                outcomes = self._run(lambda: self.engine.generate_many([(r.prompts, r.params) for r in batch]),
                                     len(batch))
            except Exception as e:  # the engine failed: every request of the call fails with it
                outcomes = [e] * len(batch)
        for r, outcome in zip(batch, outcomes, strict=True):
            r.result = outcome

    def _run(self, call: Callable[[], Any], requests: int) -> Any:
        """The engine call with its counters; an engine failure (not a caller's mistake) is EngineFailed."""
        with self._stats_lock:
            self.running += requests
        started = time.perf_counter()
        try:
            return call()
        except ValueError:  # the caller's mistake (e.g. a prompt too long): its own message
            raise
        except Exception as e:  # CUDA out of memory, a dead vLLM engine: this actor is done
            raise EngineFailed(f"engine {type(self.engine).__name__} failed: {type(e).__name__}: {e}") from e
        finally:
            with self._stats_lock:
                self.running -= requests
                self.busy_s += time.perf_counter() - started

    def load(self, checkpoint: str, version: str | None, files: dict[str, str] | None = None) -> str | None:
        """Switch to `checkpoint`, once its files match the hashes its version was published with."""
        verify_files(checkpoint, files or {}, what=f"model version {version}")  # on this node's view of it
        with self._generate_lock:  # requests already running finish on (and are tagged with) the old model
            self.engine.load(checkpoint, version)
            freeze_heap()
        return self.engine.version

    def load_weights(self, weights: dict[str, Any], version: str, checkpoint: str) -> str | None:
        """Switch to weights from memory (a state dict; Ray resolves the object ref it was sent as,
        from the object store), for engines that take them (vllm, transformers)."""
        load = getattr(self.engine, "load_weights", None)
        if load is None:
            raise TypeError(f"engine {type(self.engine).__name__} cannot take weights from memory: "
                            "load the checkpoint instead (SamplerPool.load_checkpoint)")
        with self._generate_lock:  # as load(): running requests finish on the old weights
            load(weights, version, checkpoint)
            freeze_heap()
        return self.engine.version

    def stats(self) -> dict[str, Any]:
        engine_stats = getattr(self.engine, "stats", None)  # plain counters: safe to read while it generates
        with self._stats_lock:
            return dict(version=self.engine.version, busy_s=self.busy_s, tokens_generated=self.tokens_generated,
                        requests=self.requests, running=self.running, cancelled=self.cancelled,
                        niceness=os.nice(0), engine=engine_stats() if callable(engine_stats) else {})


class SamplerShell(Shell, SamplerWorker):
    """SamplerWorker as the pool's Ray actor runs it: an actor whose engine cannot start stays
    alive, and every call raises why (common.actor_pool.Shell): CannotStart for a caller's
    mistake, raised once; EngineFailed otherwise, and the pool replaces it."""

    def __init__(self, engine: str, engine_kwargs: dict[str, Any], checkpoint: str | None, version: str | None,
                 files: dict[str, str] | None = None):
        self._start(f"a {engine} sampler actor",
                    lambda: SamplerWorker.__init__(self, engine, engine_kwargs, checkpoint, version, files))

    def ready(self) -> str | None:
        self._started()
        return super().ready()

    def context_length(self) -> int | None:
        self._started()
        return super().context_length()

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        self._started()
        return super().generate(prompts, params)

    def load(self, checkpoint: str, version: str | None, files: dict[str, str] | None = None) -> str | None:
        self._started()
        return super().load(checkpoint, version, files)

    def load_weights(self, weights: dict[str, Any], version: str, checkpoint: str) -> str | None:
        self._started()
        return super().load_weights(weights, version, checkpoint)

    def stats(self) -> dict[str, Any]:
        self._started()
        return super().stats()


def freeze_heap() -> None:
    """Move what the actor holds now (imports, the engine, the model) out of the garbage
    collector's reach, as vLLM's engine core does after start-up. An actor's heap holds about
    half a million objects, and each oldest-generation collection walked them all (0.3 s on a
    2-core machine, several per demo search); the frozen ones are still freed when their last
    reference goes. Unfreezing first lets a reload's collection free the old model's cycles."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def _cancelled() -> bool:
    """Whether ray.cancel() was called on the Ray task running this code (False outside Ray)."""
    if not ray.is_initialized():  # plain use (tests, scripts): get_runtime_context() would start Ray
        return False
    try:
        return bool(ray.get_runtime_context().is_canceled())
    except Exception:  # not inside a Ray task: nobody can cancel it
        return False
