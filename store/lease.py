"""One driver per experiment: a lease in Redis with a TTL its holder renews, and a fencing token.

    lease = store.leases(name).acquire()   # LeaseHeld names the holder's host, pid and start
    lease.renew()                          # every ttl/3 (the job runner does it in a thread)
    store.archive(name)                    # with store.fence(lease): writes check the token

Acquiring sets the lease key (only if absent) and increments the experiment's fence counter
in one step, so each holder gets a larger token. Archive transactions WATCH the counter and
abort when it moved: a driver that was paused past its TTL (or cut off from Redis) while a
second driver took over can no longer write. A driver killed with SIGKILL stops renewing,
so its lease expires after the TTL and a restart may take it; the lease is also the
experiment's heartbeat: "running" without a live lease reads as "killed".
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis

from store import keys

LEASE_TTL_S = float(os.environ.get("RATCHET_LEASE_TTL_S", "30"))  # a killed driver's lease frees after this

_ACQUIRE = """
if redis.call('exists', KEYS[1]) == 1 then return {0, redis.call('get', KEYS[1])} end
local token = redis.call('incr', KEYS[2])
local value = string.sub(ARGV[1], 1, -2) .. ',"token":' .. token .. '}'
redis.call('set', KEYS[1], value, 'PX', ARGV[2])
return {token, value}
"""
_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end
return 0
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


class LeaseHeld(RuntimeError):
    """Another driver holds the experiment's lease; the message names it."""


class LeaseLost(RuntimeError):
    """This driver's lease was taken over: it must stop writing (another driver runs now)."""


class WriteUnconfirmed(RuntimeError):
    """The connection to Redis broke at a fenced EXEC while this driver still held its lease:
    whether the write landed is unknown. Not retried in place (a batch that did land would
    count twice); the driver stops, and a rerun draws what the store says is missing."""


def watch_failed(client: redis.Redis, fence: tuple[str, int], lost: LeaseLost, error: redis.WatchError) -> Exception:
    """What a WatchError at a fenced EXEC means. redis-py raises it both when the WATCHed fence
    moved (another driver took over: `lost`) and when the connection died while watching
    (Redis restarted or the network broke: the lease may well still hold)."""
    key, token = fence
    try:
        current = client.get(key)
    except redis.RedisError as e:
        return WriteUnconfirmed(f"the connection to Redis broke at EXEC ({error}) and it cannot be read "
                                f"again ({e}); whether this write landed is unknown. Rerun the job once "
                                "Redis answers: it carries on from what was stored.")
    if current is None:
        return fence_gone(key)
    if int(current) != token:
        return lost
    return WriteUnconfirmed(f"the connection to Redis broke at EXEC ({error}); this driver still holds its "
                            "lease, but whether this write landed is unknown, so it stops rather than write "
                            "it twice. Rerun the job: it carries on from what was stored.")


def fence_gone(key: str) -> LeaseLost:
    """No driver deletes a fence: Redis lost its data (or someone flushed it)."""
    return LeaseLost(f"the lease's fence {key} is gone from Redis, so Redis lost its data (restarted without "
                     "its append-only file, or flushed) and what this experiment stored may be gone too; "
                     "check Redis' persistence (appendonly yes) before rerunning the job")


def watch_fence(pipe: redis.client.Pipeline, fence: tuple[str, int], lost: Callable[[], LeaseLost]) -> None:
    """WATCH the fence, check it still holds this driver's token, then start MULTI. Nothing is
    written before MULTI, so a connection that breaks here (redis-py raises WatchError for it
    while watching) is retried once on a new connection instead of surfacing a bare WatchError."""
    key, token = fence
    for attempt in (0, 1):
        try:
            pipe.watch(key)
            current = pipe.get(key)
            break
        except redis.WatchError as e:
            pipe.reset()
            if attempt:
                raise redis.ConnectionError(f"the connection to Redis broke twice while reading the lease's "
                                            f"fence {key} ({e}); nothing was written") from None
    if current is None or int(current) != token:
        pipe.reset()
        raise fence_gone(key) if current is None else lost()
    pipe.multi()


def lease_key(experiment: str) -> str:
    return keys.exp(experiment, "lease")


def fence_key(experiment: str) -> str:
    return keys.exp(experiment, "fence")


def describe(holder: dict[str, Any]) -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(holder.get("started", 0)))
    return f"host {holder.get('host', '?')} (pid {holder.get('pid', '?')}), started {started}"


@dataclass
class Lease:
    client: redis.Redis
    experiment: str
    token: int  # the fencing token: larger for every new holder
    value: str  # the key's exact value (holder info + token): renew/release only our own
    ttl_s: float

    @property
    def holder(self) -> dict[str, Any]:
        return json.loads(self.value)

    def renew(self) -> bool:
        """Extend the TTL; False when the lease is no longer ours (expired, or taken over)."""
        return bool(self.client.eval(_RENEW, 1, lease_key(self.experiment), self.value, int(self.ttl_s * 1000)))

    def release(self) -> None:
        self.client.eval(_RELEASE, 1, lease_key(self.experiment), self.value)


class Leases:
    def __init__(self, client: redis.Redis, experiment: str):
        self.client = client
        self.experiment = keys.check_name(experiment)

    def acquire(self, ttl_s: float | None = None) -> Lease:
        """Take the experiment's lease, or raise LeaseHeld naming the driver that has it."""
        ttl_s = LEASE_TTL_S if ttl_s is None else ttl_s
        if ttl_s <= 0:
            raise ValueError(f"lease ttl_s must be positive, got {ttl_s}")
        me = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "started": time.time()})
        token, value = self.client.eval(_ACQUIRE, 2, lease_key(self.experiment), fence_key(self.experiment),
                                        me, int(ttl_s * 1000))
        value = value.decode() if isinstance(value, bytes) else value
        if not token:
            raise LeaseHeld(
                f"experiment {self.experiment!r} is already being run by {describe(json.loads(value))}. "
                f"Wait for that driver to end (or stop it); if it was killed, its lease expires within "
                f"{ttl_s:.0f} s of its last renewal. To run alongside it, pick another experiment name."
            )
        return Lease(self.client, self.experiment, int(token), value, ttl_s)

    def holder(self) -> dict[str, Any] | None:
        """The live lease's holder (host, pid, started, token), or None when nobody holds it."""
        raw = self.client.get(lease_key(self.experiment))
        return None if raw is None else json.loads(raw)


@contextmanager
def fenced_pipeline(client: redis.Redis, experiment: str, fence: tuple[str, int] | None) -> Iterator[Any]:
    """A MULTI/EXEC pipeline that writes only while `fence` (fence counter key, this driver's
    token) still holds: it WATCHes the counter, so a driver whose lease was taken over writes
    nothing and gets LeaseLost. Without a fence, a plain transaction.

        with fenced_pipeline(client, name, store.fence_for(name)) as pipe:
            pipe.hset(key, mapping=...)          # executed on leaving the block
    """
    def lost() -> LeaseLost:
        return LeaseLost(
            f"experiment {experiment!r}: this driver's lease (fencing token {fence[1]}) was taken over by "
            "another driver, so this write was refused and nothing of it stored. Stop this driver; the "
            "other one carries on from what is stored.")

    pipe = client.pipeline(transaction=True)
    try:
        if fence is not None:
            watch_fence(pipe, fence, lost)
        yield pipe
        try:
            pipe.execute()
        except redis.WatchError as e:
            if fence is None:
                raise
            raise watch_failed(client, fence, lost(), e) from None
    finally:
        pipe.reset()
