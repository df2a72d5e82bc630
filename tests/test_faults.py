"""Failure classes (common/faults.py): what the machine did is retried, what the work did is kept."""

from __future__ import annotations

import asyncio

import pytest
import ray.exceptions as rx
import redis

from common.faults import (
    DeadlineExceeded,
    EngineFailed,
    InfrastructureError,
    is_infrastructure,
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
