"""SamplerPool: routing and backpressure (plain classes), then the pool on a real local Ray:
ordering, streaming, stats, registry loads, and an actor killed mid-request."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import ray
from _models import GREEDY, build_models, expected

from common.sampling import SamplingParams
from search.pool import PoolConfig, Router, SamplerPool, SamplerWorker

PROMPTS = [f"map {i % 10} {(3 * i) % 10} =>" for i in range(12)]


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    return build_models(tmp_path_factory)


# --- plain classes -------------------------------------------------------------------

def test_pool_config_validates_fields():
    with pytest.raises(ValueError, match="engine 'nope' is unknown"):
        PoolConfig(engine="nope")
    with pytest.raises(ValueError, match="PoolConfig.max_inflight_per_actor=0"):
        PoolConfig(max_inflight_per_actor=0)
    with pytest.raises(ValueError, match="engine_kwargs must not hold 'checkpoint'"):
        PoolConfig(engine_kwargs={"checkpoint": "/x"})
    with pytest.raises(ValueError, match="PoolConfig.niceness=-5 must be 0-19"):
        PoolConfig(niceness=-5)


def test_router_picks_the_least_loaded_slot_and_bounds_inflight():
    async def scenario():
        router = Router(limit=2)
        a, b = router.add("a"), router.add("b")
        got = [await router.acquire() for _ in range(4)]
        assert [s.handle for s in got] == ["a", "b", "a", "b"]
        waiter = asyncio.ensure_future(router.acquire())
        await asyncio.sleep(0)  # let it run up to its wait
        assert not waiter.done() and (a.inflight, b.inflight) == (2, 2)
        router.release(b)
        assert (await waiter) is b and b.inflight == 2
        router.replace(a, "a2")
        assert (a.handle, a.generation, a.restarts) == ("a2", 1, 1)

    asyncio.run(scenario())


def test_router_cancelled_waiter_passes_its_wake_up_on():
    async def scenario():
        router = Router(limit=1)
        slot = router.add("a")
        await router.acquire()
        first, second = asyncio.ensure_future(router.acquire()), asyncio.ensure_future(router.acquire())
        await asyncio.sleep(0)
        router.release(slot)
        first.cancel()
        assert (await second) is slot

    asyncio.run(scenario())


def test_worker_counts_requests_and_tokens(models):
    worker = SamplerWorker("transformers", {"num_threads": 1}, models["trained"], "v0")
    rows = worker.generate(PROMPTS[:3], SamplingParams(n=2, temperature=0, max_tokens=8))
    stats = worker.stats()
    assert stats["requests"] == 1 and stats["version"] == "v0" and stats["running"] == 0
    assert stats["tokens_generated"] == sum(c.completion_tokens for r in rows for c in r) == 18
    cache = stats["engine"]["prefix_cache"]  # the engine's own stats ride along
    assert cache["enabled"] and cache["prompt_tokens"] == sum(r[0].prompt_tokens for r in rows)
    assert worker.load(models["untrained"], "v1") == "v1"


def test_worker_freezes_its_heap_and_a_reload_frees_the_old_model(models):
    """Oldest-generation collections walked every object of the actor (0.3 s each on 2 cores);
    frozen after a load, they do not, and a reload still frees the model it replaces."""
    import gc
    import weakref

    try:
        worker = SamplerWorker("transformers", {"num_threads": 1}, models["trained"], "v0")
        model = worker.engine.model
        assert gc.get_freeze_count() > 0
        assert not any(o is model for o in gc.get_objects())  # frozen: out of the collector's walks
        old = weakref.ref(model)
        del model
        worker.load(models["untrained"], "v1")
        assert old() is None
        assert not any(o is worker.engine.model for o in gc.get_objects())
    finally:
        gc.unfreeze()


def test_worker_refuses_a_version_whose_files_changed_after_publish(models, store, experiment_name, tmp_path):
    import shutil

    from store.models import CheckpointChanged
    from training.checkpoints import publish

    ckpt = tmp_path / "v1"
    shutil.copytree(models["untrained"], ckpt)
    mv = publish(store, experiment_name, ckpt, parent=None, metrics={})
    shutil.copy(Path(models["trained"]) / "model.safetensors", ckpt / "model.safetensors")  # replaced later
    worker = SamplerWorker("transformers", {"num_threads": 1}, models["trained"], "v0")
    with pytest.raises(CheckpointChanged, match="model.safetensors"):
        worker.load(mv.checkpoint, mv.version, mv.files)
    assert worker.stats()["version"] == "v0"  # still serving the model it had


# --- on Ray ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pool(ray_local, models):
    pool = SamplerPool(
        PoolConfig(num_actors=2, num_cpus_per_actor=0.5, max_inflight_per_actor=2, prompts_per_request=3,
                   engine_kwargs={"num_threads": 1}),
        checkpoint=models["trained"], version="v0",
    )
    asyncio.run(pool.ready())
    yield pool
    pool.shutdown()


def test_pool_returns_every_prompt_in_order_tagged_with_the_version(pool, models):
    asyncio.run(pool.load_checkpoint(models["trained"], "v0"))
    rows = pool.generate_sync(PROMPTS, SamplingParams(n=2, temperature=0, max_tokens=8))
    assert [[c.text for c in row] for row in rows] == [[expected(p)] * 2 for p in PROMPTS]
    assert {c.model_version for row in rows for c in row} == {"v0"}


def test_pool_streams_results_as_they_complete_and_spreads_load(pool, models):
    async def scenario():
        await pool.load_checkpoint(models["trained"], "v0")
        before = {s.index: s.requests for s in await pool.stats()}
        seen = {}
        async for i, row in pool.stream(PROMPTS, GREEDY, prompts_per_request=2):
            seen[i] = row[0].text
        after = await pool.stats()
        return seen, before, after

    seen, before, after = asyncio.run(scenario())
    assert seen == {i: expected(p) for i, p in enumerate(PROMPTS)}
    served = [s.requests - before[s.index] for s in after]
    assert sum(served) == 6 and all(n > 0 for n in served)  # 6 requests, both actors used
    assert all(s.queue_depth == 0 and s.running == 0 and s.busy_s > 0 and s.tokens_generated > 0 for s in after)


def test_pool_load_switches_every_actor_to_a_registry_version(pool, models, store, experiment_name):
    registry = store.models(experiment_name)
    registry.publish(models["untrained"])
    v1 = registry.publish(models["trained"], parent="v0")
    pool.config.experiment = experiment_name
    try:
        mv = asyncio.run(pool.load())  # the current version
        assert mv.version == v1.version == "v1"
        rows = pool.generate_sync(PROMPTS, GREEDY)
        assert {row[0].model_version for row in rows} == {"v1"}
        assert {s.version for s in asyncio.run(pool.stats())} == {"v1"}
        with pytest.raises(KeyError, match="v9"):
            asyncio.run(pool.load("v9"))
    finally:
        pool.config.experiment = None


def test_pool_takes_weights_from_the_object_store(pool, models):
    """load_weights: a state dict put once in Ray's object store reaches every actor; the
    answers are the trained model's though the actors last loaded the untrained checkpoint."""
    import ray
    from safetensors.torch import load_file

    asyncio.run(pool.load_checkpoint(models["untrained"], "v0"))
    untrained = pool.generate_sync(PROMPTS, GREEDY)
    weights = {}
    for f in sorted(Path(models["trained"]).glob("*.safetensors")):
        weights |= load_file(str(f))
    assert asyncio.run(pool.load_weights(ray.put(weights), "v1", models["trained"])) is not None
    rows = pool.generate_sync(PROMPTS, GREEDY)
    assert [row[0].text for row in rows] == [expected(p) for p in PROMPTS] != [row[0].text for row in untrained]
    assert {row[0].model_version for row in rows} == {"v1"} and {s.version for s in asyncio.run(pool.stats())} == {"v1"}
    assert pool.checkpoint == models["trained"]  # what a replacement actor would start on


def test_pool_started_on_a_changed_version_refuses_to_serve_it(ray_local, models, store, experiment_name, tmp_path):
    """The first version is checked too: actors started on a published checkpoint whose files
    changed since refuse it, as a later load would."""
    import shutil

    from training.checkpoints import publish

    ckpt = tmp_path / "v0"
    shutil.copytree(models["untrained"], ckpt)
    mv = publish(store, experiment_name, ckpt, parent=None, metrics={})
    shutil.copy(Path(models["trained"]) / "model.safetensors", ckpt / "model.safetensors")
    pool = SamplerPool(PoolConfig(engine="transformers", engine_kwargs={"num_threads": 1}, num_actors=1,
                                  num_cpus_per_actor=0.5, max_request_retries=0),
                       checkpoint=mv.checkpoint, version=mv.version, files=mv.files)
    try:
        with pytest.raises(Exception, match="differ from the hashes recorded at publish"):
            asyncio.run(pool.ready())
    finally:
        pool.shutdown()


def test_pool_rejects_a_too_long_prompt_and_keeps_serving(pool, models):
    from common.sampling import ContextLengthError

    asyncio.run(pool.load_checkpoint(models["trained"], "v0"))
    with pytest.raises(ContextLengthError, match="maximum context length"):
        pool.generate_sync(["map " * 1000], GREEDY)
    assert pool.generate_sync(["map 2 =>"], GREEDY)[0][0].text == expected("map 2 =>")


def test_actor_killed_mid_request_is_restarted_and_nothing_is_lost(pool, models):
    """Regression guard for the issue's promise: callers lose nothing when an actor dies."""
    params = SamplingParams(n=4, temperature=1.0, max_tokens=400, seed=0)

    async def scenario():
        await pool.load_checkpoint(models["untrained"], "v-random")  # rarely stops early: long requests
        restarts = {s.index: s.restarts for s in await pool.stats()}
        task = asyncio.ensure_future(pool.generate(PROMPTS, params))
        # Wait (on a condition, not a clock) until an actor is executing a request.
        while not (busy := [s for s in await pool.stats() if s.running]):
            assert not task.done(), "the requests finished before one could be caught running"
            await asyncio.sleep(0.01)
        victim = busy[0].index
        ray.kill(pool.router.slots[victim].handle)
        rows = await task
        return rows, victim, restarts, await pool.stats()

    rows, victim, before, after = asyncio.run(scenario())
    assert len(rows) == len(PROMPTS) and all(len(row) == 4 for row in rows)
    assert {c.model_version for row in rows for c in row} == {"v-random"}
    assert after[victim].restarts == before[victim] + 1
    assert after[victim].version == "v-random"  # the replacement loaded the pool's current checkpoint
    # The replacement serves new work.
    assert len(pool.generate_sync(PROMPTS, GREEDY)) == len(PROMPTS)


def test_an_actor_lost_at_its_fail_point_with_a_batch_done_is_replaced_and_nothing_is_lost(pool, models, failpoints):
    """The fault drills' sampler loss (common/failpoints.py): the actor that finishes a batch
    stops before sending it, is SIGKILLed there, and the pool's retry on its replacement
    returns every row."""
    import os
    import signal

    async def scenario():
        await pool.load_checkpoint(models["trained"], "v0")
        before = {s.index: s.restarts for s in await pool.stats()}
        failpoints.arm("sampler_batch")
        task = asyncio.ensure_future(pool.generate(PROMPTS, GREEDY))
        hit = await asyncio.to_thread(failpoints.wait_hit, "sampler_batch", lambda: not task.done())
        assert hit is not None and hit["prompts"] >= 1, hit
        os.kill(hit["pid"], signal.SIGKILL)
        return await task, before, await pool.stats()

    rows, before, after = asyncio.run(scenario())
    assert [row[0].text for row in rows] == [expected(p) for p in PROMPTS]
    assert sum(s.restarts for s in after) == sum(before.values()) + 1


# --- failures from inside a live actor, and deadlines ------------------------------------------

def _break_engine(handle, how: str) -> None:
    """Inside the live actor: its engine fails (as CUDA out of memory or a dead vLLM engine
    does) or hangs on every later request. Runs in the actor via Ray's __ray_call__."""

    def breaker(worker, how):
        import threading

        def fail(*args, **kwargs):
            raise RuntimeError("CUDA error: out of memory")

        def hang(*args, **kwargs):
            threading.Event().wait()

        worker.engine.generate = fail if how == "fail" else hang

    ray.get(handle.__ray_call__.remote(breaker, how))


@pytest.mark.parametrize("how", ["fail", "hang"])
def test_an_engine_that_fails_or_hangs_inside_a_live_actor_is_replaced(pool, models, how):
    """The actor is alive, its engine is not: the request is retried on a replacement (a hung
    one once its deadline passes) and the caller gets every completion."""
    asyncio.run(pool.load_checkpoint(models["trained"], "v0"))
    before = {s.index: s.restarts for s in asyncio.run(pool.stats())}
    _break_engine(pool.router.slots[0].handle, how)
    pool.config.request_timeout_s = 30.0  # the hung engine's request is given up after this
    try:
        # bounded: the unfixed pool waits on a hung engine for ever
        rows = asyncio.run(asyncio.wait_for(pool.generate(PROMPTS, GREEDY), 300))
    finally:
        pool.config.request_timeout_s = PoolConfig().request_timeout_s
    assert [row[0].text for row in rows] == [expected(p) for p in PROMPTS]
    after = asyncio.run(pool.stats())
    assert after[0].restarts == before[0] + 1 and after[0].version == "v0"


def test_a_caller_mistake_is_not_retried_as_an_infrastructure_failure(pool, models):
    from common.faults import is_infrastructure
    from common.sampling import ContextLengthError

    before = [s.restarts for s in asyncio.run(pool.stats())]
    with pytest.raises(ContextLengthError) as info:
        pool.generate_sync(["map " * 1000], GREEDY)
    assert not is_infrastructure(info.value)
    assert [s.restarts for s in asyncio.run(pool.stats())] == before


def test_pool_actors_run_at_their_niceness_and_keep_the_jobs_runtime_env(ray_local, models):
    """PoolConfig.niceness reaches the actor processes (Ray's own default for workers is 15)."""
    from common.logs import WORKER_SETUP_HOOK
    from store.connection import ENV_URL

    nice = SamplerPool(PoolConfig(num_actors=1, num_cpus_per_actor=0.5, niceness=7, engine_kwargs={"num_threads": 1}),
                       checkpoint=models["trained"], version="v0")
    try:
        asyncio.run(nice.ready())
        assert [s.niceness for s in asyncio.run(nice.stats())] == [7]
        options = nice._actor_options["runtime_env"]
    finally:
        nice.shutdown()

    @ray.remote(num_cpus=0)
    def environment() -> tuple:
        import os

        return os.nice(0), os.environ.get(ENV_URL), ray.get_runtime_context().runtime_env.get("worker_process_setup_hook")

    # the actors' runtime_env adds to the job's (its store URL, its log set-up), never replaces it
    assert ray.get(environment.options(runtime_env=options).remote()) == (7, os.environ[ENV_URL], WORKER_SETUP_HOOK)


def test_an_actor_lost_while_the_pool_starts_is_replaced(ray_local, models):
    """Found by the chaos run: a sampler actor killed before it had loaded its model failed
    the job in pool.ready()."""
    pool = SamplerPool(PoolConfig(num_actors=1, num_cpus_per_actor=0.5, engine_kwargs={"num_threads": 1}),
                       checkpoint=models["trained"], version="v0")
    try:
        ray.kill(pool.router.slots[0].handle)  # as the memory monitor or a lost node would
        assert asyncio.run(pool.ready()) == ["v0"]
        assert pool.router.slots[0].restarts == 1
        assert pool.generate_sync(PROMPTS[:2], GREEDY)[0][0].text == expected(PROMPTS[0])
    finally:
        pool.shutdown()


def test_stats_of_a_pool_whose_actor_died_report_it_empty(ray_local, models):
    """Regression: a dead actor's stats row lacked `niceness`, so pool.stats() raised TypeError
    once any actor had died (a lost node: SOAR's search failed at its end-of-search stats)."""
    pool = SamplerPool(PoolConfig(num_actors=1, num_cpus_per_actor=0.5, engine_kwargs={"num_threads": 1}),
                       checkpoint=models["trained"], version="v0")
    try:
        asyncio.run(pool.ready())
        handle = pool.router.slots[0].handle
        ray.kill(handle, no_restart=True)
        for _ in range(100):  # until Ray reports it dead (a bounded wait on the condition)
            try:
                ray.get(handle.ready.remote(), timeout=30)
            except Exception:
                break
        (row,) = asyncio.run(pool.stats())
        assert (row.version, row.requests, row.niceness) == (None, 0, None)
    finally:
        pool.shutdown()


def test_an_actor_that_cannot_start_fails_the_pool_once_naming_why(ray_local):
    """Issue 47: an engine whose constructor raises a caller's mistake (a bad engine argument,
    a missing package, a checkpoint that does not load) is not retried on fresh actors, each
    dying the same way: the pool fails once, in one line naming the cause, and the retry
    advice (for infrastructure failures) is not given."""
    from common.faults import CannotContinue, is_infrastructure

    pool = SamplerPool(PoolConfig(num_actors=1, num_cpus_per_actor=0.5, max_request_retries=2,
                                  engine_kwargs={"num_threads": 1, "batch_size": 0}))
    try:
        with pytest.raises(CannotContinue) as info:
            asyncio.run(pool.ready())
        # the one actor started, none after it (the unfixed pool started 1 + max_request_retries)
        assert [s.restarts for s in pool.router.slots] == [0]
        message = str(info.value)
        assert "ValueError: batch_size=0 must be >= 1" in message and "\n" not in message
        assert "max_request_retries" not in message and not is_infrastructure(info.value)
        # a request sent anyway (its actor never started) fails the same way, at once
        with pytest.raises(CannotContinue, match="batch_size=0"):
            pool.generate_sync(PROMPTS[:1], GREEDY)
        assert [s.restarts for s in pool.router.slots] == [0]
    finally:
        pool.shutdown()


def test_a_served_search_whose_client_disconnects_cancels_its_pool_request(pool):
    """Issue #45: a search whose client went away sends nothing more, and the request it has in
    the pool is cancelled (SamplerPool.submit: ray.cancel), not left to generate for nobody."""
    from _asgi import post_then_disconnect

    from search.serve.app import build_app
    from search.serve.deployment import PoolBackend

    outcomes: list[tuple[str | None, str]] = []  # (regex, "done" | "cancelled") per generate

    async def drive() -> list[dict]:
        gone = asyncio.Event()

        class Watched(PoolBackend):
            async def generate(self, prompts, params):
                if params.regex is not None:
                    gone.set()  # the verdicts are out: the client leaves now
                try:
                    rows = await super().generate(prompts, params)
                except asyncio.CancelledError:
                    outcomes.append((params.regex, "cancelled"))
                    raise
                outcomes.append((params.regex, "done"))
                return rows

        body = {"messages": [{"role": "user", "content": "map 3 1 4 =>"}], "max_tokens": 6, "seed": 1,
                "search": {"k": 4, "style": "compact"}}
        return await post_then_disconnect(build_app(Watched(pool), model_name="tiny"), "/v1/chat/completions",
                                          body, gone)

    sent = asyncio.run(drive())
    assert sent[0]["status"] == 499
    assert outcomes == [(None, "done"), (" [01]", "cancelled")]
    assert pool.generate_sync(["map 1 =>"], GREEDY)[0][0].text == expected("map 1 =>")  # the pool still serves
