"""common/actor_pool.py: the Router's choices (a plain class), then ActorPool on a real local Ray
with a tiny echo actor: a dead actor replaced once and its calls retried, a hung one given up at
its deadline, a caller's mistake raised once, an actor that cannot start (Shell) raised once or
replaced, and the retries' end. The sampler and verifier pools' own tests: test_pool.py,
test_pool_faults.py, test_arc_pool.py."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from collections.abc import Callable

import psutil
import pytest
import ray

from common.actor_pool import ActorPool, Router, Shell, Slot
from common.faults import CannotStart, EngineFailed, InfrastructureError, is_infrastructure
from common.placement import LEDGER, node_id

# Ray's workers cannot import a test module: its actor class travels to them by value
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Echo(Shell):
    """An actor that answers, fails as asked, or could not start (`fail`)."""

    def __init__(self, fail: str | None = None):
        self._start("an echo actor", lambda: self._init(fail))

    def _init(self, fail: str | None) -> None:
        if fail == "mistake":
            raise ValueError("width=0\nmust be >= 1")
        if fail == "machine":
            raise RuntimeError("CUDA error: out of memory")

    def echo(self, x: int, how: str = "answer") -> int:
        self._started()
        if how == "mistake":
            raise KeyError(f"no item {x}")
        if how == "engine":
            raise EngineFailed("the engine died")
        if how == "hang":
            threading.Event().wait()
        return x

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str | None:
        return node_id()


EchoActor = ray.remote(Echo)


class EchoPool(ActorPool):
    kind, what = "echo", "call"

    def __init__(self, size: int = 1, *, fail: str | None = None, round_robin: bool = False):
        self.fail = fail
        super().__init__(size, round_robin=round_robin)

    def _spawn(self):
        return EchoActor.options(num_cpus=0, max_restarts=0).remote(self.fail)

    async def echo(self, x: int, *, how: Callable[[Slot], str] = lambda slot: "answer", retries: int = 2) -> int:
        async def attempt(slot: Slot, handle) -> int:
            kind = how(slot)
            # a deadline for the call that never answers only: a replacement's start is not timed
            return await self._within_deadline(handle.echo.remote(x, kind), slot, 0.5 if kind == "hang" else None)

        return await self._retrying(attempt, retries=retries, units=1)


def first_actor(kind: str) -> Callable[[Slot], str]:
    """`kind` on each slot's first actor, answers on its replacements."""
    return lambda slot: kind if slot.restarts == 0 else "answer"


def sigkill(handle) -> None:
    """Kill the actor's process as a lost node does, and wait until it is gone."""
    pid = ray.get(handle.pid.remote())
    process = psutil.Process(pid)
    os.kill(pid, signal.SIGKILL)
    process.wait(timeout=60)


@pytest.fixture
def pools():
    made: list[EchoPool] = []

    def make(*args, **kwargs) -> EchoPool:
        made.append(EchoPool(*args, **kwargs))
        return made[-1]

    yield make
    for pool in made:
        pool._kill_all()


# --- the router ------------------------------------------------------------------------

def test_round_robin_deals_in_turn_whatever_the_load_and_never_holds_a_caller():
    """The verifier's chunks go to the next actor in turn (a retried one to the next actor);
    least-loaded, the samplers' choice, takes the idle one again."""

    async def scenario(round_robin: bool) -> list[str]:
        router = Router(None, round_robin=round_robin)
        for name in "abc":
            router.add(name)
        first = await router.acquire()
        router.release(first)
        got = [first] + [await router.acquire() for _ in range(4)]  # no bound: nobody waits
        return [s.handle for s in got]

    assert asyncio.run(scenario(round_robin=True)) == ["a", "b", "c", "a", "b"]
    assert asyncio.run(scenario(round_robin=False)) == ["a", "a", "b", "c", "a"]


# --- on Ray ------------------------------------------------------------------------------

def test_a_call_is_answered_and_credited_to_the_node_of_its_actor(ray_local, pools):
    pool = pools(2, round_robin=True)
    node = ray.get_runtime_context().get_node_id()
    before = LEDGER.served.get("echo", {}).get(node, {"requests": 0})["requests"]
    assert asyncio.run(pool.echo(7)) == 7 and asyncio.run(pool.echo(8)) == 8
    assert LEDGER.served["echo"][node]["requests"] == before + 2
    assert [s.node for s in pool.slots] == [node, node]  # each actor asked once, when it first answered
    assert pool.restarts == 0 and [s.inflight for s in pool.slots] == [0, 0]


def test_a_dead_actor_is_replaced_once_and_every_call_on_it_retried(ray_local, pools):
    """Two calls lost with the same actor: one replacement (its slot's generation), both answered."""
    pool = pools(1)
    old = pool.slots[0].handle
    sigkill(old)

    async def both() -> list[int]:
        return list(await asyncio.gather(pool.echo(1), pool.echo(2)))

    assert asyncio.run(both()) == [1, 2]
    assert pool.restarts == 1 and pool.slots[0].handle is not old and pool.slots[0].generation == 1


@pytest.mark.parametrize("how", ["engine", "hang"])
def test_an_actor_whose_engine_failed_or_hung_is_replaced_and_the_call_retried(ray_local, pools, how):
    pool = pools(1)
    assert asyncio.run(pool.echo(5, how=first_actor(how))) == 5
    assert pool.restarts == 1


def test_a_hung_call_with_no_retries_left_says_which_actor_and_which_deadline(ray_local, pools):
    pool = pools(1)
    with pytest.raises(InfrastructureError, match=r"^echo call failed on 1 actors in a row") as info:
        asyncio.run(pool.echo(5, how=lambda slot: "hang", retries=0))
    assert "echo actor 0 did not answer within request_timeout_s=0.5" in str(info.value)
    assert pool.restarts == 1  # the hung actor is not left holding its slot


def test_a_caller_mistake_is_raised_as_it_is_and_not_retried(ray_local, pools):
    pool = pools(1)
    handle = pool.slots[0].handle
    with pytest.raises(KeyError, match="no item 3") as info:
        asyncio.run(pool.echo(3, how=lambda slot: "mistake"))
    assert not is_infrastructure(info.value)
    assert pool.restarts == 0 and pool.slots[0].handle is handle
    assert asyncio.run(pool.echo(4)) == 4  # the same actor serves on


def test_an_actor_that_cannot_start_for_a_caller_mistake_fails_once_in_one_line(ray_local, pools):
    """Shell: the actor stays alive and says why; a fresh one would fail the same way, so none is started."""
    pool = pools(1, fail="mistake")
    with pytest.raises(CannotStart) as info:
        asyncio.run(pool.echo(1))
    assert str(info.value) == "an echo actor could not start: ValueError: width=0 must be >= 1"
    assert info.value.__cause__ is not None  # the actor's traceback, for run.log
    assert pool.restarts == 0


def test_an_actor_that_cannot_start_for_the_machine_is_replaced_until_the_retries_run_out(ray_local, pools):
    pool = pools(1, fail="machine")
    with pytest.raises(InfrastructureError, match=r"^echo call failed on 3 actors in a row \(last: EngineFailed\("
                                                  r"'an echo actor could not start: RuntimeError: CUDA error"):
        asyncio.run(pool.echo(1, retries=2))
    assert pool.restarts == 3  # each failed actor replaced: the pool is whole for the next call


def test_kill_all_ends_every_actor(ray_local, pools):
    pool = pools(2)
    processes = [psutil.Process(ray.get(s.handle.pid.remote())) for s in pool.slots]
    pool._kill_all()
    for process in processes:
        process.wait(timeout=60)  # returns once the process is gone; raises if it outlives the wait
