"""Identical prompts in one seeded call get different completions, on every engine: a parent
refined twice in a batch must give two children, not one child twice."""

from __future__ import annotations

import pytest

from common.sampling import SamplingParams
from search.engines.hf import TransformersEngine
from search.engines.openai_engine import request_groups


def test_openai_requests_never_carry_a_prompt_twice_under_one_seed():
    prompts = ["a", "b", "a", "c", "a", [{"role": "user", "content": "hi"}], "d"]
    groups = request_groups(prompts, SamplingParams(n=2, seed=100), size=8)
    assert sorted(i for idx, _ in groups for i in idx) == list(range(len(prompts)))
    for idx, params in groups:
        texts = [prompts[i] for i in idx]
        assert all(isinstance(t, str) for t in texts) or len(idx) == 1
        assert len({str(t) for t in texts}) == len(texts), f"a prompt twice in one request: {texts}"
        assert params.n == 2
    seeds = [params.seed for _, params in groups]
    assert len(set(seeds)) == len(seeds)  # every request its own seed
    # the same call gives the same requests: a seeded call stays reproducible
    assert request_groups(prompts, SamplingParams(n=2, seed=100), size=8) == groups


def test_openai_requests_are_batched_when_nothing_repeats_or_there_is_no_seed():
    assert [idx for idx, _ in request_groups(["a", "b", "c"], SamplingParams(seed=1), size=2)] == [[0, 1], [2]]
    unseeded = request_groups(["a", "a", "a"], SamplingParams(), size=8)
    assert [idx for idx, _ in unseeded] == [[0, 1, 2]] and unseeded[0][1].seed is None


@pytest.fixture(scope="module")
def engine(soar_model):
    return TransformersEngine(soar_model, version="v0", batch_size=8)


def test_transformers_engine_samples_identical_prompts_apart(engine):
    prompt = "from evolution.dsl import *\n\ndef transform(grid):\n"
    rows = engine.generate([prompt, prompt, prompt], SamplingParams(temperature=1.0, max_tokens=24, seed=7))
    texts = [row[0].text for row in rows]
    assert len(set(texts)) > 1, texts
    again = engine.generate([prompt, prompt, prompt], SamplingParams(temperature=1.0, max_tokens=24, seed=7))
    assert [row[0].text for row in again] == texts  # and the seed still makes the call reproducible
