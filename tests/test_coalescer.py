"""Requests that gather while the engine is busy go to it in one call (search/sampler_worker.py)."""

from __future__ import annotations

import threading

import pytest
from ray.exceptions import TaskCancelledError

from common.sampling import SamplingParams
from search.sampler_worker import Coalescer

WAIT_S = 30  # an upper bound for a thread to arrive; the test never waits it out when it passes


class Engine:
    """run_many records each call's requests; the first call holds until the test lets it go."""

    def __init__(self):
        self.calls: list[list[str]] = []
        self.first_running, self.release = threading.Event(), threading.Event()

    def run_many(self, batch):
        self.calls.append([r.prompts[0] for r in batch])
        if len(self.calls) == 1:
            self.first_running.set()
            assert self.release.wait(WAIT_S)
        for r in batch:
            r.result = ValueError(f"{r.prompts[0]} is too long") if r.prompts[0] == "bad" else [[r.prompts[0].upper()]]


def start(coalescer, prompt, results, cancel=None):
    def run():
        if cancel is not None:
            local.cancel = cancel
        try:
            results[prompt] = coalescer.submit([prompt], SamplingParams())
        except Exception as e:
            results[prompt] = e

    t = threading.Thread(target=run)
    t.start()
    return t


local = threading.local()


def pending(coalescer, count):
    with coalescer._cond:
        assert coalescer._cond.wait_for(lambda: len(coalescer._pending) == count, WAIT_S)


def test_requests_arriving_while_the_engine_runs_share_its_next_call_each_with_its_own_result():
    engine = Engine()
    coalescer = Coalescer(engine.run_many, cancelled=lambda: False)
    results: dict[str, object] = {}
    first = start(coalescer, "a", results)
    assert engine.first_running.wait(WAIT_S)
    rest = [start(coalescer, p, results) for p in ("b", "bad", "c")]
    pending(coalescer, 3)
    engine.release.set()
    for t in [first, *rest]:
        t.join(WAIT_S)
    assert engine.calls == [["a"], ["b", "bad", "c"]] and coalescer.batches == [1, 3]
    assert results["a"] == [["A"]] and results["b"] == [["B"]] and results["c"] == [["C"]]
    assert isinstance(results["bad"], ValueError)  # its own mistake, in its own thread
    assert coalescer.submit(["d"], SamplingParams()) == [["D"]] and engine.calls[-1] == ["d"]  # alone: at once


def test_a_request_whose_caller_went_away_leaves_before_its_batch():
    engine = Engine()
    coalescer = Coalescer(engine.run_many, cancelled=lambda: getattr(local, "cancel", None) is not None
                          and local.cancel.is_set())
    results: dict[str, object] = {}
    gone = threading.Event()
    first = start(coalescer, "a", results)
    assert engine.first_running.wait(WAIT_S)
    leaving = start(coalescer, "b", results, cancel=gone)
    pending(coalescer, 1)
    gone.set()
    staying = start(coalescer, "c", results)  # its arrival wakes the waiters, who look at their callers
    leaving.join(WAIT_S)
    assert isinstance(results["b"], TaskCancelledError)
    engine.release.set()
    for t in (first, staying):
        t.join(WAIT_S)
    assert engine.calls == [["a"], ["c"]] and results["c"] == [["C"]]


def test_an_engine_failure_fails_every_request_of_its_call():
    def broken(batch):
        for r in batch:
            r.result = RuntimeError("engine died")

    with pytest.raises(RuntimeError, match="engine died"):
        Coalescer(broken, cancelled=lambda: False).submit(["a"], SamplingParams())
