"""ArcExecutor: run programs on a task's inputs in warm sandboxes, with the execution cache.

    with ArcExecutor(workers=2, cache=store.exec_cache) as ex:
        results = ex.execute_many(task, programs)   # one ProgramResult per program, in order

The executor is plain Python (threads talk to the worker processes; the work happens in
them), so it is testable without Ray; pool.py wraps it in an actor. Per batch:

1. hash every program (normalized code hash) and drop duplicates within the batch; what
   runs is the normalized source itself (store.codehash.normalize_code), so a result is a
   function of the hash, even for a program whose output depends on its line numbers;
2. look the rest up in the cache under the task fingerprint, which covers the input grids,
   the limits and verifier version, and the source of the allowed modules, so changing
   any of them starts a fresh cache; expected outputs are not part of it (results are
   scored after lookup), so the same inputs with different answers share entries;
3. run the misses, one program per fork, spread over the idle workers;
4. store the new executions and score every program against the expected outputs.

Everything the program decided is cached, CPU timeouts included: a program that never
stops is the costliest to repeat. What the machine may have decided is not (results.py
TRANSIENT_ERRORS): a lost worker, a wall-clock timeout with CPU budget left, a SIGKILL or
another signal the program cannot raise itself. Such programs are run again (up to
``transient_retries`` times) at once; one whose sandbox worker is still lost after that
raises InfrastructureError (common/faults.py) instead of returning the loss as its result.
"""

from __future__ import annotations

import hashlib
import json
import queue
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common.faults import InfrastructureError
from store import ExecutionCache, content_hash, normalize_code
from verifiers.arc.grids import ArcTask, encode_rows
from verifiers.arc.results import InputResult, ProgramResult
from verifiers.arc.sandbox import PROJECT_ROOT, SandboxLimits, SandboxWorker
from verifiers.arc.scoring import score_input


class ArcExecutor:
    """Executes ARC programs in ``workers`` warm sandbox processes (started on first use)."""

    def __init__(self, *, workers: int = 1, limits: SandboxLimits | None = None,
                 allowed_modules: Sequence[str] = (), extra_paths: Sequence[str | Path] = (),
                 cache: ExecutionCache | None = None, transient_retries: int = 2):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if transient_retries < 0:
            raise ValueError(f"transient_retries must be >= 0, got {transient_retries}")
        self.transient_retries = transient_retries
        self.workers = workers
        self.limits = limits or SandboxLimits()
        self.allowed_modules = tuple(allowed_modules)
        self.extra_paths = tuple(str(p) for p in extra_paths)
        self.cache = cache
        self._modules_digest = _modules_digest(self.allowed_modules,
                                               [*self.extra_paths, str(PROJECT_ROOT)])
        self._idle: queue.SimpleQueue[SandboxWorker] = queue.SimpleQueue()
        self._all: list[SandboxWorker] = []
        self._threads: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.executed = 0   # programs actually run in a sandbox
        self.reused = 0     # programs answered by the cache or a duplicate in their batch

    # ------------------------------------------------------------------ lifecycle
    def _ensure_started(self) -> None:
        with self._lock:
            if self._threads is not None:
                return
            workers = [SandboxWorker(allowed_modules=self.allowed_modules,
                                     extra_paths=self.extra_paths) for _ in range(self.workers)]
            with ThreadPoolExecutor(self.workers) as starter:  # ~0.5 s each, in parallel
                errors = [f.exception() for f in [starter.submit(w.start) for w in workers]]
            if any(errors):
                for w in workers:
                    w.close()
                raise next(e for e in errors if e)
            for w in workers:
                self._all.append(w)
                self._idle.put(w)
            self._threads = ThreadPoolExecutor(self.workers, thread_name_prefix="arc-sandbox")

    def close(self) -> None:
        with self._lock:
            if self._threads is not None:
                self._threads.shutdown(wait=True)
                self._threads = None
            for w in self._all:
                w.close()
            self._all.clear()
            self._idle = queue.SimpleQueue()

    def __enter__(self) -> ArcExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def worker_pids(self) -> list[int]:
        return [w.pid for w in self._all if w.pid is not None]

    # ------------------------------------------------------------------ execution
    def fingerprint(self, task: ArcTask) -> str:
        """Cache key part for a task: its inputs + limits/version + allowed modules' source."""
        return content_hash(json.dumps(
            [[encode_rows(g) for g in task.inputs], self.limits.tag(), self._modules_digest]))

    def execute(self, task: ArcTask, code: str) -> ProgramResult:
        return self.execute_many(task, [code])[0]

    def execute_many(self, task: ArcTask, programs: Sequence[str]) -> list[ProgramResult]:
        """One ProgramResult per program, in order; identical programs run once."""
        if isinstance(programs, str):
            raise TypeError("programs: expected a sequence of source strings, got one string; "
                            "use execute(task, code) for a single program")
        # Run exactly the text that is hashed: programs that share a hash (they differ in
        # comments, blank lines, formatting) then share a result by construction, even one
        # that depends on line numbers (f_lineno, tracebacks). code_hash(c) is
        # content_hash(normalize_code(c)) (a test holds it), so each program is parsed once.
        normalized = [normalize_code(c) for c in programs]
        hashes = [content_hash(n) for n in normalized]
        unique: dict[str, str] = {}
        for h, n in zip(hashes, normalized, strict=True):
            unique.setdefault(h, n)
        fp = self.fingerprint(task)
        n_inputs = len(task.inputs)
        done = self._lookup(fp, list(unique), n_inputs)
        missing = [h for h in unique if h not in done]
        fresh = self._run_all(fp, task, [unique[h] for h in missing])
        for _ in range(self.transient_retries):  # what the machine may have decided: decide again
            again = [i for i, runs in enumerate(fresh) if any(r.transient for r in runs)]
            if not again:
                break
            for i, runs in zip(again, self._run_all(fp, task, [unique[missing[i]] for i in again]), strict=True):
                fresh[i] = runs
        done.update(zip(missing, fresh, strict=True))
        if self.cache is not None:
            self.cache.set_many([
                (fp, h, {"inputs": [r.to_cache() for r in runs]})
                for h, runs in zip(missing, fresh, strict=True)
                if not any(r.transient for r in runs)])
        lost = [runs for runs in fresh if any(r.infrastructure for r in runs)]
        if lost:  # never a program's result: the caller retries the batch (what ran is cached)
            why = next(r.message for r in lost[0] if r.infrastructure)
            raise InfrastructureError(
                f"task {task.id}: {len(lost)} program(s) lost their sandbox worker "
                f"{self.transient_retries + 1} times in a row (last: {why}); check the machine's "
                "memory and the worker's stderr")
        ran = set(missing)
        results = []
        expected = task.expected
        n_train = len(task.train)
        for h in hashes:
            scored = [score_input(r, e) for r, e in zip(done[h], expected, strict=True)]
            results.append(ProgramResult(task.id, h, tuple(scored[:n_train]),
                                         tuple(scored[n_train:]), cached=h not in ran))
            ran.discard(h)  # a later duplicate in this batch is served, not run
        self.executed += len(missing)
        self.reused += len(programs) - len(missing)
        return results

    def _lookup(self, fp: str, hashes: list[str], n_inputs: int) -> dict[str, list[InputResult]]:
        if self.cache is None or not hashes:
            return {}
        found: dict[str, list[InputResult]] = {}
        for h, entry in zip(hashes, self.cache.get_many([(fp, h) for h in hashes]), strict=True):
            raw = entry.get("inputs") if isinstance(entry, dict) else None
            if not isinstance(raw, list) or len(raw) != n_inputs:
                continue
            runs = [InputResult.from_cache(x) for x in raw]
            if all(r is not None for r in runs):
                found[h] = runs  # type: ignore[assignment]
        return found

    def _run_all(self, fp: str, task: ArcTask, codes: list[str]) -> list[list[InputResult]]:
        """Spread ``codes`` over idle workers; each pulls from one shared queue (balance)."""
        if not codes:
            return []
        self._ensure_started()
        assert self._threads is not None
        jobs: queue.SimpleQueue[tuple[int, str]] = queue.SimpleQueue()
        for job in enumerate(codes):
            jobs.put(job)
        results: list[list[InputResult]] = [[] for _ in codes]

        def done(index: int, runs: list[InputResult]) -> None:
            results[index] = runs

        def drive() -> None:
            worker = self._idle.get()
            try:
                worker.run_queue(fp, task.inputs, self.limits, jobs, done)
            finally:
                self._idle.put(worker)

        for f in [self._threads.submit(drive) for _ in range(min(self.workers, len(codes)))]:
            f.result()
        return results

    def ping(self) -> list[dict[str, Any]]:
        """Each idle worker's health (fds, rss_kb, pid); waits for busy ones to finish."""
        self._ensure_started()
        workers = [self._idle.get() for _ in range(len(self._all))]
        try:
            return [{"pid": w.pid, **w.ping()} for w in workers]
        finally:
            for w in workers:
                self._idle.put(w)

    def stats(self) -> dict[str, Any]:
        return {"executed": self.executed, "reused": self.reused, "workers": self.workers,
                "restarts": sum(w.restarts for w in self._all)}


def _modules_digest(names: Sequence[str], paths: Sequence[str]) -> dict[str, str]:
    """Hash of each allowed module's source (a package: all its .py files), found on
    ``paths`` without importing it. Raises ValueError naming a module that is not there."""
    digests = {}
    for name in names:
        rel = Path(*name.split("."))
        for base in map(Path, paths):
            candidates = [base / rel.with_suffix(".py"), base / rel / "__init__.py"]
            hit = next((c for c in candidates if c.is_file()), None)
            if hit is not None:
                files = sorted(hit.parent.rglob("*.py")) if hit.name == "__init__.py" else [hit]
                h = hashlib.sha256()
                for f in files:
                    h.update(f.read_bytes())
                digests[name] = h.hexdigest()[:20]
                break
        else:
            raise ValueError(f"allowed_modules: {name!r} not found under {list(paths)}; "
                             "give its dotted name relative to the project root or extra_paths")
    return digests
