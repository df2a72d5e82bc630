"""SamplerWorker: what runs inside each sampler actor (one engine and its counters).

A plain class, testable without Ray; search/pool.py wraps it in a Ray actor (`SamplerActor`)
and routes requests to it. It loads checkpoints (files checked against the registry's
hashes) or weights handed over in memory, generates, counts, and reports its stats.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import TaskCancelledError

from common.config import secret_values
from common.faults import EngineFailed
from common.logs import protect
from common.placement import node_id
from common.sampling import Completion, Prompt, SamplingParams
from common.secrets import resolve_secret_refs
from search.engines import make_engine
from store.models import verify_files

# Threads an actor keeps beyond its generate slots, so stats() and load() answer while it works.
CONTROL_THREADS = 2


@dataclass
class ActorStats:
    index: int  # slot in the pool (a restarted actor keeps its slot)
    version: str | None  # model version loaded
    busy_s: float  # seconds spent generating
    tokens_generated: int
    requests: int  # generate calls served
    running: int  # generate calls executing now (0 or 1)
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
        self.engine = make_engine(engine, **engine_kwargs)
        self._generate_lock = threading.Lock()  # one generation at a time: it uses every core/the GPU
        self._stats_lock = threading.Lock()
        self.busy_s = 0.0
        self.tokens_generated = 0
        self.requests = 0
        self.running = 0
        self.cancelled = 0
        if checkpoint is not None:
            verify_files(checkpoint, files or {}, what=f"model version {version}")
            self.engine.load(checkpoint, version)
        freeze_heap()

    def ready(self) -> str | None:
        return self.engine.version

    def context_length(self) -> int | None:
        return self.engine.context_length

    def node_id(self) -> str | None:
        """The Ray node this actor runs on: the driver credits the node with what it served."""
        return node_id()

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        with self._generate_lock:
            if _cancelled():  # its caller went away while it waited for the engine: skip it
                with self._stats_lock:
                    self.cancelled += 1
                raise TaskCancelledError()
            with self._stats_lock:
                self.running += 1
            started = time.perf_counter()
            try:
                results = self.engine.generate(prompts, params)
            except ValueError:  # the caller's mistake (e.g. a prompt too long): its own message
                raise
            except Exception as e:  # CUDA out of memory, a dead vLLM engine: this actor is done
                raise EngineFailed(f"engine {type(self.engine).__name__} failed: {type(e).__name__}: {e}") from e
            finally:
                with self._stats_lock:
                    self.running -= 1
                    self.busy_s += time.perf_counter() - started
        with self._stats_lock:
            self.requests += 1
            self.tokens_generated += sum(c.completion_tokens for row in results for c in row)
        return results

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
