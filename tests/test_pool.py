"""SamplerPool: routing and backpressure (plain classes), then the pool on a real local Ray:
ordering, streaming, stats, registry loads, and a served search's cancellation. Its faults (actors
killed, engines failing or hanging) are tests/test_pool_faults.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import ray
from _models import GREEDY, build_models, expected, small_pool

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
    pool = small_pool(models["trained"])
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
