"""sampler.weight_sync: which path a switch takes (plain functions), then SamplerPool.switch on a
real local Ray with the tiny digit-map models: the weights handed over in memory serve, `disk`
loads the checkpoint whatever it is handed, and `auto` falls back to the checkpoint when the
weights do not fit. The loops' use of it: tests/test_tpo_weights.py, tests/test_soar_job.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from _models import GREEDY, build_models, expected

from search.pool import PoolConfig, SamplerPool
from search.weight_sync import FASTER, Switch, check_weight_sync, planned_path, takes_weights

PROMPTS = [f"map {i} {(7 * i) % 10} =>" for i in range(6)]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return build_models(tmp_path_factory)


def state_dict(checkpoint: str) -> dict:
    from safetensors.torch import load_file

    out = {}
    for f in sorted(Path(checkpoint).glob("*.safetensors")):
        out |= load_file(str(f))
    return out


# --- plain functions ----------------------------------------------------------------

def test_auto_takes_the_path_measured_faster_for_each_engine():
    assert FASTER == {"transformers": "memory", "vllm": "disk"}  # docs/vllm-cpu.md's switch figures
    assert [planned_path("auto", e) for e in ("transformers", "vllm", "openai")] == ["memory", "disk", "disk"]
    assert [planned_path(m, "vllm") for m in ("memory", "disk")] == ["memory", "disk"]
    assert planned_path("disk", "transformers") == "disk"


def test_memory_is_refused_for_an_engine_that_cannot_take_weights():
    with pytest.raises(ValueError, match="openai engine cannot take weights from memory.*weight_sync=disk"):
        PoolConfig(engine="openai", weight_sync="memory")
    with pytest.raises(ValueError, match="must be one of auto, memory, disk"):
        check_weight_sync("fast", "transformers")
    PoolConfig(engine="openai", weight_sync="auto")  # auto: the openai engine loads checkpoints


def test_memory_is_accepted_where_the_engine_takes_weights_and_the_field_is_named():
    assert takes_weights("transformers") and takes_weights("vllm") and not takes_weights("openai")
    for mode in ("auto", "memory", "disk"):
        check_weight_sync(mode, "transformers")
    check_weight_sync("disk", "openai")
    with pytest.raises(ValueError, match=r"^mix.weight_sync=memory, but the openai engine .* set mix.weight_sync=disk"):
        check_weight_sync("memory", "openai", field="mix.weight_sync")


def test_a_switch_reports_its_path_seconds_and_why_it_fell_back():
    quick = Switch("v3", "memory", 0.2049)
    assert quick.summary() == {"switch_s": 0.2049, "weight_sync": "memory"}  # no note: no note key
    assert quick.line() == "samplers switched to v3 in memory in 0.20 s"
    slow = Switch("v4", "disk", 1.5, note="no weights in memory")
    assert slow.summary() == {"switch_s": 1.5, "weight_sync": "disk", "weight_sync_note": "no weights in memory"}
    assert slow.line() == "samplers switched to v4 from its checkpoint in 1.50 s (no weights in memory)"


# --- the pool on a real local Ray ---------------------------------------------------

@pytest.fixture(scope="module")
def pool(ray_local, models):
    pool = SamplerPool(PoolConfig(num_actors=2, num_cpus_per_actor=0.5, engine_kwargs={"num_threads": 1}),
                       checkpoint=models["untrained"], version="v0")
    asyncio.run(pool.ready())
    yield pool
    pool.shutdown()


def switch(pool, version, weights, mode: str):
    import ray

    pool.config.weight_sync = mode
    try:
        return asyncio.run(pool.switch(version, ray.put(weights) if weights is not None else None))
    finally:
        pool.config.weight_sync = "auto"


def answers(pool) -> tuple[list[str], set[str | None]]:
    rows = pool.generate_sync(PROMPTS, GREEDY)
    return [r[0].text for r in rows], {r[0].model_version for r in rows}


@pytest.fixture
def published(store, experiment_name, models):
    """v0 the untrained checkpoint, v1 the trained one, in a fresh registry."""
    from training.checkpoints import publish

    v0 = publish(store, experiment_name, models["untrained"], parent=None, metrics={})
    return v0, publish(store, experiment_name, models["trained"], parent="v0", metrics={})


def test_memory_serves_the_weights_handed_over_not_the_checkpoint(pool, published, models):
    """The untrained checkpoint published as v0, the trained weights handed over for it: the
    answers are the trained model's, so they came from memory."""
    v0, _ = published
    switch(pool, v0, None, "disk")
    untrained, _ = answers(pool)
    done = switch(pool, v0, state_dict(models["trained"]), "memory")
    assert (done.path, done.version, done.note) == ("memory", "v0", "")
    texts, tags = answers(pool)
    assert texts == [expected(p) for p in PROMPTS] != untrained and tags == {"v0"}
    assert pool.checkpoint == v0.checkpoint and pool.files == v0.files  # what a replacement actor loads


def test_disk_loads_the_checkpoint_whatever_it_is_handed(pool, published, models):
    v0, v1 = published
    switch(pool, v0, None, "disk")
    done = switch(pool, v1, state_dict(models["untrained"]), "disk")  # the wrong weights: never read
    assert (done.path, done.version, done.summary()["weight_sync"]) == ("disk", "v1", "disk")
    assert answers(pool) == ([expected(p) for p in PROMPTS], {"v1"})


def test_auto_loads_the_checkpoint_when_the_weights_do_not_fit_and_memory_refuses(pool, published, models):
    v0, v1 = published
    switch(pool, v0, None, "disk")
    wrong = {k: v[:1] for k, v in state_dict(models["trained"]).items()}
    with pytest.raises(ValueError, match="do not fit the loaded model"):
        switch(pool, v1, wrong, "memory")
    done = switch(pool, v1, wrong, "auto")
    assert done.path == "disk" and "do not fit the loaded model" in done.note
    assert done.summary()["weight_sync_note"] == done.note
    assert answers(pool) == ([expected(p) for p in PROMPTS], {"v1"})
    switch(pool, v0, None, "disk")
    none = switch(pool, v1, None, "auto")  # a version trained before a restart: no weights in memory
    assert none.path == "disk" and "no weights in memory" in none.note
