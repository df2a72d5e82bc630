"""Failure classes: the machine's failures are retried, the work's own are its result.

Every layer that calls a worker (the sampler pool, the verifier pool, the sandbox executor)
asks `is_infrastructure(error)`:

- infrastructure: a lost worker or node, an actor killed by Ray's memory monitor
  (`ray.exceptions.OutOfMemoryError`, not a `RayActorError`), an engine that died inside a
  live actor (CUDA out of memory, a dead vLLM engine: `EngineFailed`), a request past its
  deadline (`DeadlineExceeded`), a store that stopped answering. The worker is replaced and
  the request retried; nothing of it is ever archived as a program's or response's result.
- everything else is the caller's mistake or the work's own outcome (a prompt too long, a
  program that raises), raised or recorded as it is.

A worker that cannot start is judged the same way (`start_failure`): a caller's mistake in
its constructor (a missing package, a bad engine argument, a checkpoint that does not load)
would stop every fresh worker too, so it is `CannotStart`, raised once; anything else
(CUDA out of memory while loading) is `EngineFailed`, and the worker is replaced.

Ray wraps an exception raised inside an actor in a `RayTaskError` whose `cause` is the
original; the classification looks through it.
"""

from __future__ import annotations

import asyncio


class CannotContinue(RuntimeError):  # noqa: N818 (a verdict on the run, like StopIteration)
    """The work cannot go on for a reason its user must fix (its data, its judge, its prompt): the
    job says so in one line, without a traceback; the same command resumes after the fix."""


class CannotStart(CannotContinue):
    """A worker's constructor raised a caller's mistake: a fresh worker would fail the same way,
    so the job fails once, in one line naming the cause (its traceback goes to run.log)."""


# What a worker's constructor raises when what it was given is wrong, not its machine:
# a bad argument, a missing package, a checkpoint that does not load (FileNotFoundError is an OSError).
START_MISTAKES: tuple[type[BaseException], ...] = (ValueError, TypeError, ImportError, OSError)


class InfrastructureError(RuntimeError):
    """The machine failed, not the work: retry elsewhere; never record it as a result."""


class EngineFailed(InfrastructureError):
    """An engine raised something other than a caller's mistake (its actor is replaced)."""


class DeadlineExceeded(InfrastructureError, TimeoutError):
    """A request got no answer within its deadline (a hung engine or worker)."""


def _infrastructure_types() -> tuple[type[BaseException], ...]:
    import ray.exceptions as rx
    import redis.exceptions as redis_x

    return (
        InfrastructureError, asyncio.TimeoutError,
        rx.RayActorError,  # the actor died or is unreachable (ActorDiedError, ActorUnavailableError)
        rx.OutOfMemoryError,  # Ray's memory monitor killed the worker
        rx.WorkerCrashedError, rx.NodeDiedError, rx.LocalRayletDiedError, rx.OwnerDiedError,
        rx.ObjectLostError, rx.ObjectFetchTimedOutError, rx.GetTimeoutError, rx.RaySystemError,
        redis_x.ConnectionError, redis_x.TimeoutError, redis_x.BusyLoadingError,
    )


def is_infrastructure(error: BaseException) -> bool:
    """True when `error` is the machine's failure (see the module docstring)."""
    import ray.exceptions as rx

    if isinstance(error, rx.RayTaskError):  # raised inside an actor or task: judge its cause
        cause = error.cause
        return cause is not None and cause is not error and is_infrastructure(cause)
    return isinstance(error, _infrastructure_types())


def unwrap(error: BaseException) -> BaseException:
    """The exception raised inside a Ray actor (its RayTaskError's cause), else `error`."""
    import ray.exceptions as rx

    if isinstance(error, rx.RayTaskError) and isinstance(error.cause, BaseException):
        return error.cause
    return error


def start_failure(error: Exception, what: str) -> Exception:
    """What `what` (a worker) raises for the error its constructor raised: CannotStart for a
    caller's mistake (never retried), EngineFailed for anything else (the worker is replaced)."""
    cause = f"{what} could not start: {type(error).__name__}: {error}"
    if isinstance(error, START_MISTAKES) and not is_infrastructure(error):  # a TimeoutError is the machine's
        return CannotStart(" ".join(cause.split()))  # one line, whatever the engine's message
    return EngineFailed(cause)
