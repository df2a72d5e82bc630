"""One driver per experiment: the lease refuses a second driver, expires after a kill, and its
fencing token stops a superseded driver's archive writes."""

from __future__ import annotations

import socket
import time

import pytest
import redis

from store import LeaseHeld, LeaseLost, Store
from store.lease import lease_key
from thinking.state import TpoState


def _rec(i: int) -> dict:
    return {"task_id": "t1", "code": f"def transform(g):\n    return {i}\n", "kind": "sample"}


def test_a_second_driver_of_the_same_experiment_refuses_naming_the_first(store: Store, experiment_name: str):
    first = store.leases(experiment_name).acquire(ttl_s=60)
    with pytest.raises(LeaseHeld) as err:
        store.leases(experiment_name).acquire(ttl_s=60)
    message = str(err.value)
    assert socket.gethostname() in message and "pid" in message and "started" in message
    assert time.strftime("%Y-%m-%d", time.gmtime(first.holder["started"])) in message
    other = store.leases(f"{experiment_name}-b").acquire(ttl_s=60)  # other experiments are free
    assert other.token == 1
    first.release()
    assert store.leases(experiment_name).acquire(ttl_s=60).token == first.token + 1


def test_a_killed_drivers_lease_expires_and_a_restart_takes_over(store: Store, experiment_name: str):
    dead = store.leases(experiment_name).acquire(ttl_s=0.3)  # its driver "dies": nobody renews it
    deadline = time.monotonic() + 30
    while store.leases(experiment_name).holder() is not None:  # Redis expires the key
        if time.monotonic() > deadline:
            raise AssertionError("the lease never expired")
        time.sleep(0.05)
    restarted = store.leases(experiment_name).acquire(ttl_s=60)
    assert restarted.token > dead.token
    assert not dead.renew()  # the old holder cannot revive it
    assert restarted.renew()


def test_archive_writes_of_a_superseded_driver_are_refused(store: Store, experiment_name: str):
    old = Store(store.client)
    old_lease = old.leases(experiment_name).acquire(ttl_s=60)
    old.fence(old_lease)
    assert old.archive(experiment_name).add_many([_rec(0)], counters={"n": 1}) == [True]
    # the old driver is paused past its TTL: its lease expires and a new driver takes over
    store.client.delete(lease_key(experiment_name))
    new = Store(store.client)
    new.fence(new.leases(experiment_name).acquire(ttl_s=60))
    with pytest.raises(LeaseLost, match="taken over by another driver"):
        old.archive(experiment_name).add_many([_rec(1)], counters={"n": 1})
    with pytest.raises(LeaseLost):  # its evaluation namespaces too
        old.archive(f"{experiment_name}.eval.v1.0").add_many([_rec(1)])
    with pytest.raises(LeaseLost, match="published nothing"):  # no second "iteration 1" version
        old.models(experiment_name).publish("/ckpt/it1", note="iteration 1")
    assert store.models(experiment_name).list() == []
    assert new.models(experiment_name).publish("/ckpt/it1", note="iteration 1").version == "v0"
    archive = store.archive(experiment_name)
    assert (archive.count("t1"), archive.samples("t1"), archive.counters(["n"])) == (1, 1, [1])  # nothing leaked
    assert new.archive(experiment_name).add_many([_rec(1)], counters={"n": 1}) == [True]
    assert (archive.count("t1"), archive.counters(["n"])) == (2, [2])


def test_scaling_and_tpo_writes_of_a_superseded_driver_are_refused(store: Store, experiment_name: str):
    """The scaling sampler's and TPO's state writes go through the fence as the archive's do."""
    import asyncio

    from scaling.sampling import SamplingPlan, ScalingSampler
    from thinking.state import TpoState

    old = Store(store.client)
    old.fence(old.leases(experiment_name).acquire(ttl_s=60))
    fence = old.fence_for(experiment_name)
    plan = SamplingPlan(k_inf=1, k_verif=1, k_tie=0, compare_classes=1, temperature=1.0, verify_temperature=1.0,
                        max_tokens=4, verify_max_tokens=4, style="compact", batch_questions=1, model="m")
    sampler = ScalingSampler(store.client, experiment_name, None, plan, fence=fence)
    sampler._save("candidates", {"q0": {"texts": []}})
    tpo = TpoState(store.client, experiment_name, fence)
    tpo.put_rows({"i0": 1}, "samples")
    # the old driver is paused past its TTL; a new one takes over
    store.client.delete(lease_key(experiment_name))
    Store(store.client).fence(store.leases(experiment_name).acquire(ttl_s=60))
    with pytest.raises(LeaseLost, match="taken over"):
        sampler._save("candidates", {"q1": {"texts": []}})
    with pytest.raises(LeaseLost):
        asyncio.run(ScalingSampler(store.client, f"{experiment_name}", None, plan, fence=fence).run([]))
    with pytest.raises(LeaseLost):
        tpo.put_rows({"i1": 1}, "samples")
    with pytest.raises(LeaseLost):
        tpo.put({"x": 1}, "pairs")
    assert set(sampler.stored("candidates", ["q0", "q1"])) == {"q0"}
    assert set(tpo.get_rows("samples")) == {"i0"} and tpo.get("pairs") is None


NAME = "ratchet-test-breaks-at-exec"


class _BrokenAtExec(redis.client.Pipeline):
    """A real pipeline whose connection the server drops just before EXEC (Redis restarted,
    the network broke): redis-py then raises WatchError, as it does when the fence moves."""

    admin: redis.Redis

    def execute(self, raise_on_error: bool = True):
        if self.watching:
            for c in self.admin.client_list():
                if c["name"] == NAME:
                    self.admin.client_kill_filter(_id=c["id"])
        return super().execute(raise_on_error)


class _BreaksAtExec(redis.Redis):
    def pipeline(self, transaction: bool = True, shard_hint=None) -> redis.client.Pipeline:
        return _BrokenAtExec(self.connection_pool, self.response_callbacks, transaction, shard_hint)


def test_a_connection_lost_at_exec_is_not_called_a_takeover(store: Store, experiment_name: str, redis_server):
    """A dropped connection at a fenced EXEC says the write is unconfirmed, not that another
    driver took the lease (which it did not: the lease still holds)."""
    client = _BreaksAtExec.from_url(redis_server.url, client_name=NAME)
    _BrokenAtExec.admin = store.client
    driver = Store(client)
    driver.fence(driver.leases(experiment_name).acquire(ttl_s=60))
    for write in (lambda: driver.archive(experiment_name).add_many([_rec(0)], counters={"n": 1}),
                  lambda: TpoState(client, experiment_name, driver.fence_for(experiment_name)).put({"x": 1}, "pairs")):
        with pytest.raises(RuntimeError, match="still holds its lease") as err:  # old code: LeaseLost
            write()
        assert type(err.value).__name__ == "WriteUnconfirmed"
    assert store.leases(experiment_name).holder() is not None  # nobody took it over
    assert driver.archive(experiment_name).counters(["n"]) == [0]  # killed before EXEC reached the server


class _FlushedAtExec(redis.client.Pipeline):
    """A real pipeline whose fence key vanishes just before EXEC, as after a Redis restart that lost
    its data."""

    admin: redis.Redis
    key: str

    def execute(self, raise_on_error: bool = True):
        if self.watching:
            self.admin.delete(self.key)
        return super().execute(raise_on_error)


class _FlushesAtExec(redis.Redis):
    def pipeline(self, transaction: bool = True, shard_hint=None) -> redis.client.Pipeline:
        return _FlushedAtExec(self.connection_pool, self.response_callbacks, transaction, shard_hint)


def test_a_fence_gone_from_redis_says_redis_lost_its_data_not_a_takeover(store: Store, experiment_name: str,
                                                                         redis_server):
    client = _FlushesAtExec.from_url(redis_server.url)
    driver = Store(client)
    driver.fence(driver.leases(experiment_name).acquire(ttl_s=60))
    _FlushedAtExec.admin, _FlushedAtExec.key = store.client, driver.fence_for(experiment_name)[0]
    with pytest.raises(LeaseLost, match="Redis lost its data") as err:  # old code: "taken over by another driver"
        driver.archive(experiment_name).add_many([_rec(0)], counters={"n": 1})
    assert "taken over" not in str(err.value)
    assert driver.archive(experiment_name).counters(["n"]) == [0]


class _DropsAtFenceRead(redis.client.Pipeline):
    """A real pipeline whose connection the server drops at its first read of the fence after
    WATCH (redis-py then raises WatchError, before anything is written)."""

    admin: redis.Redis
    dropped = 0

    def immediate_execute_command(self, *args, **options):
        if args[0] == "GET" and self.watching and not _DropsAtFenceRead.dropped:
            _DropsAtFenceRead.dropped += 1
            for c in self.admin.client_list():
                if c["name"] == NAME:
                    self.admin.client_kill_filter(_id=c["id"])
        return super().immediate_execute_command(*args, **options)


class _DropsOnce(redis.Redis):
    def pipeline(self, transaction: bool = True, shard_hint=None) -> redis.client.Pipeline:
        return _DropsAtFenceRead(self.connection_pool, self.response_callbacks, transaction, shard_hint)


def test_a_connection_lost_while_reading_the_fence_is_retried_not_a_bare_watch_error(
        store: Store, experiment_name: str, redis_server):
    client = _DropsOnce.from_url(redis_server.url, client_name=NAME)
    _DropsAtFenceRead.admin = store.client
    driver = Store(client)
    driver.fence(driver.leases(experiment_name).acquire(ttl_s=60))
    writes = (lambda: driver.archive(experiment_name).add_many([_rec(0)], counters={"n": 1}),
              lambda: TpoState(client, experiment_name, driver.fence_for(experiment_name)).put({"x": 1}, "pairs"))
    for write in writes:
        _DropsAtFenceRead.dropped = 0
        write()  # old code: redis.WatchError("A ConnectionError occurred on while watching ...")
        assert _DropsAtFenceRead.dropped == 1
    assert driver.archive(experiment_name).counters(["n"]) == [1]
    assert TpoState(client, experiment_name).get("pairs") == {"x": 1}


def test_a_publish_after_redis_lost_the_fence_says_so_not_a_takeover(store: Store, experiment_name: str):
    driver = Store(store.client)
    driver.fence(driver.leases(experiment_name).acquire(ttl_s=60))
    store.client.delete(driver.fence_for(experiment_name)[0])  # a Redis restarted without its data
    with pytest.raises(LeaseLost, match="Redis lost its data") as err:  # old code: "taken over by another driver"
        driver.models(experiment_name).publish("/ckpt/it1", note="iteration 1")
    assert "taken over" not in str(err.value)
    assert store.models(experiment_name).list() == []


class _DropsAtEveryFenceRead(redis.client.Pipeline):
    """A real pipeline whose connection breaks at each read after WATCH (a flapping network)."""

    admin: redis.Redis
    dropped = 0

    def immediate_execute_command(self, *args, **options):
        if args[0] == "GET" and self.watching:
            _DropsAtEveryFenceRead.dropped += 1
            if _DropsAtEveryFenceRead.dropped > 20:  # the old code retried forever: fail instead of hanging
                raise AssertionError("publish kept retrying a connection that breaks every time")
            for c in self.admin.client_list():
                if c["name"] == NAME:
                    self.admin.client_kill_filter(_id=c["id"])
        return super().immediate_execute_command(*args, **options)


class _AlwaysDrops(redis.Redis):
    def pipeline(self, transaction: bool = True, shard_hint=None) -> redis.client.Pipeline:
        return _DropsAtEveryFenceRead(self.connection_pool, self.response_callbacks, transaction, shard_hint)


def test_a_publish_whose_connection_keeps_breaking_gives_up_with_a_connection_error(
        store: Store, experiment_name: str, redis_server):
    client = _AlwaysDrops.from_url(redis_server.url, client_name=NAME)
    _DropsAtEveryFenceRead.admin, _DropsAtEveryFenceRead.dropped = store.client, 0
    driver = Store(client)
    driver.fence(driver.leases(experiment_name).acquire(ttl_s=60))
    with pytest.raises(redis.ConnectionError, match="nothing was published"):
        driver.models(experiment_name).publish("/ckpt/it1", note="iteration 1")
    assert 1 < _DropsAtEveryFenceRead.dropped <= 5
    assert store.models(experiment_name).list() == []


# -- edges found by `make mutate MODULES=lease` (docs/testing.md, issue 46) ------------------------

def test_acquire_and_renew_set_the_ttl_in_milliseconds(store: Store, experiment_name: str):
    day = 86_400.0  # a long TTL: a wrong factor moves it by minutes, far more than the test's own run
    lease = store.leases(experiment_name).acquire(ttl_s=day)
    key = lease_key(experiment_name)
    assert day * 1000 - 60_000 < store.client.pttl(key) <= day * 1000
    store.client.pexpire(key, 5_000)
    assert lease.renew() and day * 1000 - 60_000 < store.client.pttl(key) <= day * 1000
    assert isinstance(lease.value, str) and lease.holder["token"] == lease.token


def test_a_ttl_of_zero_is_refused(store: Store, experiment_name: str):
    with pytest.raises(ValueError, match="ttl_s must be positive, got 0"):
        store.leases(experiment_name).acquire(ttl_s=0)
    assert store.leases(experiment_name).holder() is None


def test_a_lease_from_a_client_that_decodes_answers_works_alike(store: Store, experiment_name: str, redis_server):
    text = redis.Redis.from_url(redis_server.url, decode_responses=True)
    lease = Store(text).leases(experiment_name).acquire(ttl_s=60)
    assert isinstance(lease.value, str) and lease.renew()
    with pytest.raises(LeaseHeld):
        Store(text).leases(experiment_name).acquire(ttl_s=60)


def test_a_holder_without_its_fields_is_described_with_question_marks():
    from store.lease import describe

    assert describe({}) == "host ? (pid ?), started 1970-01-01 00:00:00 UTC"


def test_a_takeover_names_the_superseded_drivers_token(store: Store, experiment_name: str):
    old = Store(store.client)
    lease = old.leases(experiment_name).acquire(ttl_s=60)
    old.fence(lease)
    store.client.incr(old.fence_for(experiment_name)[0])  # another driver took over
    with pytest.raises(LeaseLost, match=rf"fencing token {lease.token}\)"):
        old.archive(experiment_name).add_many([_rec(0)])


def test_a_fenced_pipeline_after_a_takeover_names_this_drivers_token_and_writes_nothing(store: Store,
                                                                                       experiment_name: str):
    """fenced_pipeline's own refusal (the TPO state and other stores write through it, not the
    archive's): it names the superseded driver's token, the one a user finds in its logs."""
    from store.lease import fenced_pipeline

    old = Store(store.client)
    lease = old.leases(experiment_name).acquire(ttl_s=60)
    old.fence(lease)
    fence = old.fence_for(experiment_name)
    store.client.incr(fence[0])  # another driver took over: the counter is now token + 1
    with pytest.raises(LeaseLost, match=rf"\(fencing token {lease.token}\) was taken over"):
        with fenced_pipeline(store.client, experiment_name, fence) as pipe:
            pipe.set(f"{experiment_name}:a", 1)
    assert store.client.get(f"{experiment_name}:a") is None

def test_an_unfenced_pipeline_is_still_one_transaction(store: Store, experiment_name: str):
    from store.lease import fenced_pipeline

    with fenced_pipeline(store.client, experiment_name, None) as pipe:
        assert pipe.transaction  # MULTI/EXEC: its writes land together or not at all
        pipe.set(f"{experiment_name}:a", 1)
    assert store.client.get(f"{experiment_name}:a") == b"1"


def test_an_archive_write_whose_connection_keeps_breaking_gives_up_having_written_nothing(
        store: Store, experiment_name: str, redis_server):
    client = _AlwaysDrops.from_url(redis_server.url, client_name=NAME)
    _DropsAtEveryFenceRead.admin, _DropsAtEveryFenceRead.dropped = store.client, 0
    driver = Store(client)
    driver.fence(driver.leases(experiment_name).acquire(ttl_s=60))
    with pytest.raises(redis.ConnectionError, match="broke twice .* nothing was written"):
        driver.archive(experiment_name).add_many([_rec(0)], counters={"n": 1})
    assert _DropsAtEveryFenceRead.dropped == 2 and store.archive(experiment_name).counters(["n"]) == [0]
