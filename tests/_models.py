"""Tiny checkpoints for the sampler tests, built once per test session.

`trained`: the tiny seed model taught digit_map(last_only) ("map 3 1 4 =>" -> " 9"), so
greedy answers are checkable. `untrained`: the same architecture, random weights, which
rarely stops early: long generations for tests that must catch a request mid-flight.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from common.sampling import SamplingParams

DIGIT_MAP = "7360918254"
GREEDY = SamplingParams(temperature=0, max_tokens=8)


def expected(prompt: str) -> str:
    """What the trained model answers: the last digit through the permutation."""
    return " " + DIGIT_MAP[int(prompt.split()[-2])]


def model_config(tmp_path_factory: pytest.TempPathFactory):
    """The tiny digit-map seed model shared by the sampler and training tests."""
    from training.seed import SeedConfig

    # $RATCHET_TEST_MODELS keeps the content-hash cache between sessions (the build takes 20-100 s).
    cache = Path(os.environ.get("RATCHET_TEST_MODELS") or tmp_path_factory.getbasetemp() / "sampler-models")
    return SeedConfig(preset="tiny", max_steps=150, corpus_kwargs={"last_only": True}, cache_dir=str(cache))


def build_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from transformers import AutoTokenizer

    from training.seed import build_seed_model, init_model

    cfg = model_config(tmp_path_factory)
    cache = Path(cfg.cache_dir)
    trained = build_seed_model(cfg, progress=False).path
    untrained = cache / "untrained"
    if not (untrained / "config.json").exists():
        init_model(cfg, AutoTokenizer.from_pretrained(trained), Path(untrained))
    return {"trained": trained, "untrained": str(untrained)}


def small_pool(checkpoint: str):
    """Two sampler actors of half a CPU each on the session's Ray, ready to serve `checkpoint` as v0."""
    import asyncio

    from search.pool import PoolConfig, SamplerPool

    pool = SamplerPool(
        PoolConfig(num_actors=2, num_cpus_per_actor=0.5, max_inflight_per_actor=2, prompts_per_request=3,
                   engine_kwargs={"num_threads": 1}),
        checkpoint=checkpoint, version="v0",
    )
    asyncio.run(pool.ready())
    return pool
