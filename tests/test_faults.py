"""Failure classes (common/faults.py): what the machine did is retried, what the work did is kept."""

from __future__ import annotations

import asyncio

import pytest
import ray.exceptions as rx
import redis

from common.faults import (
    CannotContinue,
    CannotStart,
    DeadlineExceeded,
    EngineFailed,
    InfrastructureError,
    is_infrastructure,
    start_failure,
    unwrap,
)
from common.sampling import ContextLengthError


@pytest.mark.parametrize("error", [
    rx.OutOfMemoryError("Task was killed due to the node running low on memory"),  # not a RayActorError
    rx.ActorDiedError(), rx.ActorUnavailableError("unreachable", None), rx.WorkerCrashedError(),
    rx.NodeDiedError("node gone"),
    EngineFailed("engine died"), DeadlineExceeded("no answer"), asyncio.TimeoutError(),
    redis.ConnectionError("Connection refused"), redis.BusyLoadingError("Redis is loading the dataset in memory"),
], ids=lambda e: type(e).__name__)
def test_the_machines_failures_are_infrastructure(error):
    assert is_infrastructure(error)


@pytest.mark.parametrize("error", [
    ContextLengthError("too long"), ValueError("bad field"), ZeroDivisionError(), KeyError("v9"),
], ids=lambda e: type(e).__name__)
def test_the_works_own_failures_are_not(error):
    assert not is_infrastructure(error)


def test_an_error_raised_inside_an_actor_is_judged_by_its_cause():
    inside = rx.RayTaskError("generate", "traceback", EngineFailed("CUDA error: out of memory"))
    mistake = rx.RayTaskError("generate", "traceback", ContextLengthError("too long"))
    assert is_infrastructure(inside) and not is_infrastructure(mistake)
    assert isinstance(unwrap(mistake), ContextLengthError)
    assert issubclass(DeadlineExceeded, InfrastructureError) and issubclass(DeadlineExceeded, TimeoutError)


@pytest.mark.parametrize("error, raised", [
    (ValueError("batch_size=0\nmust be >= 1"), CannotStart), (TypeError("unexpected keyword 'bogus'"), CannotStart),
    (ModuleNotFoundError("No module named 'vllm'"), CannotStart), (FileNotFoundError("no config.json"), CannotStart),
    (RuntimeError("CUDA error: out of memory"), EngineFailed), (TimeoutError("server slow"), EngineFailed),
], ids=lambda e: type(e).__name__)
def test_a_worker_that_cannot_start_is_a_caller_mistake_only_for_what_a_fresh_one_would_meet(error, raised):
    """Issue 47: a constructor's caller mistake fails the job once, in one line (the runner prints
    a CannotContinue so); anything else is the machine's, and the worker is replaced."""
    failure = start_failure(error, "a sampler actor")
    assert type(failure) is raised and str(failure).startswith(f"a sampler actor could not start: {type(error).__name__}: ")
    assert is_infrastructure(failure) is (raised is EngineFailed)
    if raised is CannotStart:
        assert isinstance(failure, CannotContinue) and "\n" not in str(failure)
