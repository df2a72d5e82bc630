"""ActorPool: what the sampler pool and the verifier pool share, in the spirit of Ray's ActorPool.

    class EchoPool(ActorPool):
        kind, what = "echo", "echo call"                  # names in messages and the node ledger

        def _spawn(self):                                 # one fresh actor (max_restarts=0)
            return Echo.options(num_cpus=0, max_restarts=0).remote()

        async def echo(self, x):
            async def attempt(slot, handle):
                return await self._within_deadline(handle.echo.remote(x), slot, 60.0)
            return await self._retrying(attempt, retries=3, units=1)

Both pools keep one slot per actor and replace a failed actor in its slot themselves: Ray's
max_restarts is a budget for an actor's whole life (a long job would run out of it), and its
restart would start on the arguments the actor began with (the sampler pool's replacement starts
on the checkpoint loaded since). A call whose actor failed (common/faults.py: it died, Ray's
memory monitor killed it, its engine failed, it missed its deadline) is made again on a live
actor; a caller's mistake is raised as it is, once. An actor class that runs under a pool derives
from `Shell`, so an actor that cannot start says why instead of dying into a lost actor.

The pool knows nothing of its actors' methods: a call is an `attempt(slot, handle)` the pool
makes (Ray's `fn(actor, value)`); which slot takes it is the `Router`'s choice.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import ray

from common.faults import (
    CannotStart,
    DeadlineExceeded,
    InfrastructureError,
    is_infrastructure,
    start_failure,
    unwrap,
)
from common.placement import LEDGER

T = TypeVar("T")


@dataclass
class Slot:
    index: int
    handle: Any
    inflight: int = 0
    generation: int = 0  # bumped when the actor is replaced, so one death triggers one restart
    restarts: int = 0
    warm: bool = True  # False for a replacement until it has answered its first call (the sampler's ready())
    node: str | None = None  # the Ray node of `node_of` (the handle it was asked of)
    node_of: Any = None


class Router:
    """Slot choice with a per-slot in-flight bound (`limit`, None: none); waiters queue FIFO.

    Least-loaded by default; `round_robin` deals the free slots in turn, whatever their load."""

    def __init__(self, limit: int | None, *, round_robin: bool = False):
        self.limit = limit
        self.round_robin = round_robin
        self.slots: list[Slot] = []
        self._turn = 0
        # Plain futures made on the waiter's own loop: no asyncio primitive bound to one loop.
        self._waiters: deque[asyncio.Future] = deque()

    def add(self, handle: Any) -> Slot:
        slot = Slot(len(self.slots), handle)
        self.slots.append(slot)
        return slot

    def _pick(self) -> Slot | None:
        free = [s for s in self.slots if self.limit is None or s.inflight < self.limit]
        if not free:
            return None
        if self.round_robin:
            self._turn += 1
            return free[(self._turn - 1) % len(free)]
        return min(free, key=lambda s: (s.inflight, s.index))

    async def acquire(self) -> Slot:
        while (slot := self._pick()) is None:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                # A cancelled waiter may have been handed the wake-up: pass it on.
                if waiter.done() and not waiter.cancelled():
                    self._wake()
                raise
        slot.inflight += 1
        return slot

    def release(self, slot: Slot) -> None:
        slot.inflight -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            # Set at once (not call_soon): a waiter cancelled later still sees it was woken.
            if not waiter.done() and not waiter.get_loop().is_closed():
                waiter.set_result(None)
                return

    def replace(self, slot: Slot, handle: Any) -> None:
        slot.handle = handle
        slot.generation += 1
        slot.restarts += 1
        slot.warm = False


class ActorPool(ABC):
    """Actors in slots, each call retried on a live actor after its actor failed.

    A subclass makes one actor (`_spawn`) and says what a call is; `kind` names its actors in
    messages and in the node ledger (common/placement.py), `what` one call, `advice` what to
    look at when every retry failed."""

    kind = "actor"
    what = "call"
    advice = "see the actors' logs for why they fail"

    def __init__(self, size: int, *, limit: int | None = None, round_robin: bool = False):
        self.router = Router(limit, round_robin=round_robin)
        for _ in range(size):
            self.router.add(self._spawn())

    @abstractmethod
    def _spawn(self) -> Any:
        """One fresh actor handle (max_restarts=0: the pool replaces it, see the module docstring)."""

    @property
    def slots(self) -> list[Slot]:
        return self.router.slots

    @property
    def restarts(self) -> int:
        """Actors replaced after a failure, over every slot."""
        return sum(s.restarts for s in self.router.slots)

    def _replace(self, slot: Slot, generation: int) -> None:
        if slot.generation != generation:  # another call already replaced this actor
            return
        try:
            ray.kill(slot.handle, no_restart=True)
        except Exception:  # already gone
            pass
        self.router.replace(slot, self._spawn())

    async def _within_deadline(self, ref: Any, slot: Slot, timeout_s: float | None) -> Any:
        """Await one actor call; past `timeout_s` its actor counts as hung (DeadlineExceeded)."""
        try:
            return await asyncio.wait_for(ref, timeout_s) if timeout_s else await ref
        except asyncio.TimeoutError:
            raise DeadlineExceeded(f"{self.kind} actor {slot.index} did not answer within "
                                   f"request_timeout_s={timeout_s}") from None

    async def _retrying(self, attempt: Callable[[Slot, Any], Awaitable[T]], *, retries: int, units: int) -> T:
        """`attempt(slot, handle)` on the slot the router picks; after an infrastructure failure
        the actor is replaced and the attempt made again, up to `retries` times. The answering
        actor's node is credited with `units` (prompts, programs) in the ledger."""
        attempts = retries + 1
        for n in range(attempts):
            slot = await self.router.acquire()
            handle, generation = slot.handle, slot.generation
            try:
                result = await attempt(slot, handle)
            except Exception as e:
                if not is_infrastructure(e):  # the caller's mistake: its own message
                    cause = unwrap(e)  # an actor that could not start: its traceback (in e) for run.log
                    raise cause from (e if isinstance(cause, CannotStart) else None)
                self._replace(slot, generation)  # dead, OOM-killed, engine failed or hung
                if n == attempts - 1:
                    raise InfrastructureError(
                        f"{self.kind} {self.what} failed on {attempts} actors in a row (last: {unwrap(e)!r}); "
                        f"{self.advice}") from e
                continue
            finally:
                self.router.release(slot)
            LEDGER.add(self.kind, await self._node(slot, handle), units)
            return result
        raise AssertionError("unreachable")

    async def _node(self, slot: Slot, handle: Any) -> str | None:
        """The node of the actor that answered (asked once per actor; None if it died since)."""
        if slot.node_of is not handle:
            try:
                slot.node, slot.node_of = await handle.node_id.remote(), handle
            except Exception:  # gone right after answering: its node is unknown, the answer stands
                return None
        return slot.node

    def _kill_all(self) -> None:
        for slot in self.router.slots:
            try:
                ray.kill(slot.handle, no_restart=True)
            except Exception:  # already dead
                pass


class Shell:
    """Base of an actor class a pool runs. An actor whose constructor raises dies, Ray keeps
    only the error's text (an ActorDiedError, which reads as a lost actor: the pool would start
    another, to die the same way) and the dying process aborts with a C++ stack dump on the
    console. A shell stays alive instead, and each method that calls `_started()` first raises
    why it could not start (common.faults.start_failure): CannotStart for a caller's mistake,
    raised once by the pool; EngineFailed otherwise, and the pool replaces the actor."""

    _start_error: Exception | None = None
    _start_what = "an actor"

    def _start(self, what: str, init: Callable[[], object]) -> None:
        """Run the actor's own constructor (`init`), keeping what it raised for every later call."""
        self._start_what = what
        try:
            init()
        except Exception as e:  # raised by every guarded call (_started), with its cause chained
            self._start_error = e

    def _started(self) -> None:
        if self._start_error is not None:
            raise start_failure(self._start_error, self._start_what) from self._start_error
