"""The random-program prior runs through the real search, sandbox and vote like a model."""

from __future__ import annotations

import asyncio

import pytest

from common.sampling import SamplingParams
from evolution.backends import local_verifier
from evolution.baselines import RANDOM_PRIOR, random_prior_sampler
from evolution.driver import SearchConfig, SoarSearch
from evolution.prompts import as_prompt, sampling_prompt
from evolution.tasks import load_split
from verifiers.arc import ArcExecutor

ONE_STEP_TASKS = ["3c9b0459", "6150a2bd", "67a3c6ac", "68b16354", "74dd1130", "9dfd6313"]  # rotations/flips


@pytest.fixture(scope="module")
def tasks():
    arc = load_split("arc1-train")
    return {t: arc[t] for t in ONE_STEP_TASKS}


def test_prior_samples_are_reproducible_dsl_programs(tasks):
    sample = random_prior_sampler(tasks)
    prompt = sampling_prompt(tasks["3c9b0459"].without_answers(), "compact")
    a = asyncio.run(sample([prompt], SamplingParams(n=8, seed=1)))[0]
    b = asyncio.run(sample([prompt], SamplingParams(n=8, seed=1)))[0]
    c = asyncio.run(sample([prompt], SamplingParams(n=8, seed=2)))[0]
    assert [x.text for x in a] == [x.text for x in b] != [x.text for x in c]
    assert all(x.text.startswith("    grid = ") and x.model_version == RANDOM_PRIOR for x in a)
    assert sorted({x.text.count("grid = ") for x in a}) == [1, 2]  # the corpus's prior: one or two steps
    with pytest.raises(ValueError, match="not a compact prompt"):
        asyncio.run(sample(["something else"], SamplingParams()))


def test_prior_answers_chat_prompts_as_their_text(tasks):
    """A chat model's SOAR (search.prompt_format chat) sends one user message: the control must
    draw the same programs for it as for the text prompt (it crashed on the message list)."""
    sample = random_prior_sampler(tasks)
    text = sampling_prompt(tasks["6150a2bd"].without_answers(), "compact")
    as_text = asyncio.run(sample([text], SamplingParams(n=4, seed=3)))[0]
    as_chat = asyncio.run(sample([as_prompt(text, chat=True)], SamplingParams(n=4, seed=3)))[0]
    assert [x.text for x in as_chat] == [x.text for x in as_text]
    with pytest.raises(ValueError, match="not a compact prompt"):
        asyncio.run(sample([[{"role": "system", "content": text}]], SamplingParams()))


def test_prior_through_the_search_solves_easy_tasks(store, experiment_name, tasks):
    cfg = SearchConfig(samples_per_task=64, refinements_per_task=0, batch=16, stop_after_correct=1,
                       prompt_style="compact", one_shot=False, tasks_in_flight=3, seed=0)
    with ArcExecutor(workers=1, allowed_modules=("evolution.dsl",)) as ex:
        search = SoarSearch(cfg, sampler=random_prior_sampler(tasks), verifier=local_verifier(ex),
                            archive=store.archive(experiment_name), model_version=RANDOM_PRIOR)
        outcomes = asyncio.run(search.run(tasks))
        resumed = asyncio.run(SoarSearch(cfg, sampler=random_prior_sampler(tasks), verifier=local_verifier(ex),
                                         archive=store.archive(experiment_name), model_version=RANDOM_PRIOR).run(tasks))
    for tid, out in outcomes.items():
        assert out.no_code == 0 and all(c.model_version == RANDOM_PRIOR for c in out.candidates)
        # every correct completion counts (a duplicate too), and the count survives a restart
        assert out.correct_samples >= sum(c.fully_correct for c in out.candidates)
        assert resumed[tid].correct_samples == out.correct_samples and resumed[tid].sampled == out.sampled
        assert sum(c.all_ok for c in out.candidates) > len(out.candidates) // 2  # DSL programs mostly run
    solved = sum(any(c.fully_correct for c in o.candidates) for o in outcomes.values())
    assert solved >= 1  # one-step rotations and flips are within the prior's reach
    for out in outcomes.values():  # stop_after_correct=1: a task stops after the batch that solved its train pairs
        first = min((c.extra["seq"] for c in out.candidates if all(c.train_correct)), default=None)
        # (seq is the program's own position: its batch ends at the next multiple of 16)
        assert out.sampled == (64 if first is None else (first // 16 + 1) * 16)


def test_measure_searches_every_seed_and_split_and_reuses_a_done_search(store, experiment_name, tasks):
    """Per-seed solved counts and hit rates on demo and held-out tasks; the seed whose demo
    search is handed in is not searched again, and held-out programs go to their own archive."""
    from evolution.filters import FilterConfig
    from evolution.measure import measure
    from evolution.voting import VoteConfig

    demo, heldout = dict(list(tasks.items())[:3]), dict(list(tasks.items())[3:])
    cfg = SearchConfig(samples_per_task=64, refinements_per_task=0, batch=16, stop_after_correct=1,
                       prompt_style="compact", one_shot=False, tasks_in_flight=3, seed=0)
    with ArcExecutor(workers=1, allowed_modules=("evolution.dsl",)) as ex:
        verifier, sampler = local_verifier(ex), random_prior_sampler(tasks)
        done = asyncio.run(SoarSearch(cfg, sampler=sampler, verifier=verifier, archive=store.archive(experiment_name),
                                      model_version=RANDOM_PRIOR).run(demo))
        searched = []

        def archive_for(split_seed: str):
            searched.append(split_seed)
            return store.archive(f"{experiment_name}.{split_seed}")

        m = asyncio.run(measure(cfg, sampler=sampler, verifier=verifier, archive_for=archive_for, tasks=demo,
                                heldout=heldout, seeds=[0, 1], model_version=RANDOM_PRIOR, filters=FilterConfig(),
                                vote_cfg=VoteConfig(), reuse={0: done}))
    assert searched == ["demo.s1", "heldout.s0", "heldout.s1"]
    assert m.seeds == [0, 1] and len(m.solved_seeds) == len(m.heldout_solved_seeds) == 2
    assert all(0 <= s <= 3 for s in m.solved_seeds + m.heldout_solved_seeds)
    assert m.hit_rate == pytest.approx(sum(m.hit_rate_seeds) / 2)
    assert sum(m.heldout_solved_seeds) > 0  # rotations and flips: the prior finds some in 64 tries
    for seed in (0, 1):  # held-out programs never reach the main archive (hindsight reads it)
        assert store.archive(f"{experiment_name}.heldout.s{seed}").get_task(next(iter(heldout)))
    assert not store.archive(experiment_name).get_task(next(iter(heldout)))
