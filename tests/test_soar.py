"""SOAR search end to end with a real tiny model, the real sandbox and a real Redis:
budgets, archive, REX counts, votes, and resuming after a kill."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from evolution.backends import local_sampler, local_verifier
from evolution.config import ControlsConfig
from evolution.driver import SearchConfig, SoarSearch
from evolution.filters import FilterConfig
from evolution.records import Candidate
from evolution.tasks import load_split
from search.engines.hf import TransformersEngine
from verifiers.arc import ArcExecutor

TASK_IDS = ["3c9b0459", "6150a2bd"]  # 3x3 grids: short prompts


@pytest.fixture(scope="module")
def engine(soar_model):
    return TransformersEngine(soar_model, version="v0", batch_size=32)


@pytest.fixture(scope="module")
def executor():
    with ArcExecutor(workers=1, allowed_modules=("evolution.dsl",)) as ex:
        yield ex


@pytest.fixture(scope="module")
def tasks():
    arc = load_split("arc1-train")
    return {t: arc[t] for t in TASK_IDS}


def search_cfg(**kw) -> SearchConfig:
    defaults = dict(samples_per_task=8, refinements_per_task=4, batch=4, stop_after_correct=99, max_tokens=48,
                    prompt_style="compact", one_shot=False, tasks_in_flight=2, seed=0)
    return SearchConfig(**(defaults | kw))


class CountingSampler:
    """The real engine, counting the completions it was asked for (to check budgets)."""

    def __init__(self, engine):
        self.inner = local_sampler(engine)
        self.completions = 0

    async def __call__(self, prompts, params):
        self.completions += len(prompts) * params.n
        return await self.inner(prompts, params)


def make_search(cfg, store, experiment, engine, executor, **kw) -> tuple[SoarSearch, CountingSampler]:
    sampler = CountingSampler(engine)
    search = SoarSearch(cfg, sampler=sampler, verifier=local_verifier(executor), archive=store.archive(experiment),
                        model_version="v0", **kw)
    return search, sampler


def test_search_spends_the_budget_archives_and_votes(store, experiment_name, engine, executor, tasks):
    # the test model is barely trained: let REX refine crashing programs too, so refinement runs
    filters = FilterConfig(refine_ignores=("error", "invalid_grid"))
    search, sampler = make_search(search_cfg(), store, experiment_name, engine, executor, filters=filters)
    outcomes = asyncio.run(search.run(tasks))
    archive = store.archive(experiment_name)
    for tid, out in outcomes.items():
        assert out.sampled == 8 and out.refined == 4
        assert archive.counters([f"it0:sampled:{tid}"]) == [8]
        archived = [Candidate.from_record(r) for r in archive.get_task(tid)]
        assert {c.code_hash for c in archived} == {c.code_hash for c in out.candidates}
        assert all(c.model_version == "v0" and c.iteration == 0 for c in archived)
        assert len(out.attempts) == len(tasks[tid].test)
        refined = [c for c in archived if c.kind == "refine"]
        assert all(c.parent is not None for c in refined)
        # REX's N is really counted: one increment per refinement asked for
        assert sum(search.refine_counts(tid, out.candidates).values()) == out.refined
        # each program is placed where it was tried, not at its batch's start (the curves' x-axis)
        seqs = [c.extra["seq"] for c in out.candidates]
        assert len(set(seqs)) == len(seqs) and all(0 <= q < out.sampled + out.refined for q in seqs)
        assert out.executions + out.cache_hits == out.sampled + out.refined - out.no_code  # every program ran
    assert sampler.completions == sum(o.sampled + o.refined for o in outcomes.values())
    assert sum(len(o.candidates) for o in outcomes.values()) > 0, "the seed model wrote no program at all"


def test_refine_counts_start_afresh_each_iteration(store, experiment_name, engine, executor, tasks):
    """REX's N belongs to one iteration's search: a new model refines every parent afresh."""
    filters = FilterConfig(refine_ignores=("error", "invalid_grid"))
    first, _ = make_search(search_cfg(), store, experiment_name, engine, executor, filters=filters)
    tid = TASK_IDS[0]
    out = asyncio.run(first.run({tid: tasks[tid]}))[tid]
    assert sum(first.refine_counts(tid, out.candidates).values()) == out.refined == 4
    later, _ = make_search(search_cfg(), store, experiment_name, engine, executor, filters=filters, iteration=1)
    assert set(later.refine_counts(tid, out.candidates).values()) == {0}


def test_one_shot_example_is_the_same_after_a_restart():
    """The one-shot example is chosen by a stable hash: Python's hash() of a str changes with
    every process (PYTHONHASHSEED), so a restarted job would prompt differently."""
    import os
    import subprocess
    import sys

    code = ("from evolution.driver import SearchConfig, SoarSearch\n"
            "examples = {f'ex{i}': (None, f'code{i}') for i in range(7)}\n"
            "s = SoarSearch(SearchConfig(prompt_style='numpy'), sampler=None, verifier=None, archive=None,\n"
            "               model_version='v0', examples=examples)\n"
            "class T: id = '3c9b0459'\n"
            "print(s._one_shot(T)[1])")
    picks = {subprocess.run([sys.executable, "-c", code], env=os.environ | {"PYTHONHASHSEED": str(h)},
                            capture_output=True, text=True, check=True).stdout.strip() for h in (1, 2, 3, 4)}
    assert len(picks) == 1, picks


def test_restart_resumes_without_exceeding_the_budget(store, experiment_name, engine, executor, tasks):
    """Kill the search after its first archived batch, start again: budgets hold, nothing is lost."""
    cfg = search_cfg(refinements_per_task=0)
    batches = []

    def die_after_first_batch(task_id, n):
        if n:
            batches.append(task_id)
            raise KeyboardInterrupt("simulated kill")

    first, _ = make_search(cfg, store, experiment_name, engine, executor, on_progress=die_after_first_batch)
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(first.run({t: tasks[t] for t in TASK_IDS[:1]}))
    archive = store.archive(experiment_name)
    tid = TASK_IDS[0]
    before = {r["code_hash"] for r in archive.get_task(tid)}
    assert archive.counters([f"it0:sampled:{tid}"]) == [4]

    second, sampler = make_search(cfg, store, experiment_name, engine, executor)
    outcome = asyncio.run(second.run({tid: tasks[tid]}))[tid]
    assert outcome.sampled == 8 and sampler.completions == 4  # only the missing half was drawn
    # the resumed outcome reports the whole iteration, not just the resumed process's work
    programs = outcome.sampled - outcome.no_code
    assert outcome.executions + outcome.cache_hits == programs
    assert before <= {r["code_hash"] for r in archive.get_task(tid)}

    third, sampler = make_search(cfg, store, experiment_name, engine, executor)
    asyncio.run(third.run({tid: tasks[tid]}))
    assert sampler.completions == 0  # budget spent: a rerun samples nothing

    bigger, sampler = make_search(replace(cfg, samples_per_task=12), store, experiment_name, engine, executor)
    asyncio.run(bigger.run({tid: tasks[tid]}))
    assert sampler.completions == 4 and archive.counters([f"it0:sampled:{tid}"]) == [12]


def test_search_config_validation_names_the_field():
    with pytest.raises(ValueError, match="search.batch"):
        SearchConfig(batch=0)
    with pytest.raises(ValueError, match="search.samples_per_task"):
        SearchConfig(samples_per_task=-1)


@pytest.mark.parametrize("retries", [None, 0], ids=["executor-retries", "driver-guard"])
def test_a_lost_sandbox_is_never_the_result_archived_for_a_program(store, experiment_name, engine, executor,
                                                                   tasks, retries):
    """The archive keeps a program's first result for good: when every sandbox run is lost
    (the zygote killed before each reply), the batch fails as the machine's failure and
    nothing is archived, so a rerun on a healthy verifier archives the programs' real results.
    retries=None: the executor retries and raises; 0: it returns the loss and the driver refuses it."""
    from _breakers import kill_zygote_as_programs_arrive

    from common.faults import InfrastructureError

    tid = TASK_IDS[0]
    cfg = search_cfg(samples_per_task=4, refinements_per_task=0)
    kw = {} if retries is None else {"transient_retries": retries}
    with ArcExecutor(workers=1, allowed_modules=("evolution.dsl",), **kw) as flaky:
        flaky.ping()
        kills = kill_zygote_as_programs_arrive(flaky, times=None)
        broken, _ = make_search(cfg, store, experiment_name, engine, flaky)
        with pytest.raises(InfrastructureError, match="sandbox worker"):
            asyncio.run(broken.run({tid: tasks[tid]}))
    archive = store.archive(experiment_name)
    assert kills and archive.get_task(tid) == [] and archive.counters([f"it0:sampled:{tid}"]) == [0]

    healthy, sampler = make_search(cfg, store, experiment_name, engine, executor)
    outcome = asyncio.run(healthy.run({tid: tasks[tid]}))[tid]
    assert sampler.completions == 4 and outcome.sampled == 4
    for cand in map(Candidate.from_record, archive.get_task(tid)):
        fresh = executor.execute(tasks[tid], cand.code)
        assert list(cand.statuses) == [r.status for r in fresh.train + fresh.test]
        assert list(cand.train_correct) == [bool(r.correct) for r in fresh.train]


def test_a_search_resumed_mid_refinement_draws_what_an_uninterrupted_one_draws(store, experiment_name, engine,
                                                                                executor, tasks):
    """REX's parent choice is seeded per refinement batch, not once per search: a search
    killed after its first refinement batch and resumed picks the parents, and so writes the
    programs, an uninterrupted one does (the soar chaos run once ended one program apart)."""
    cfg = search_cfg(samples_per_task=4, refinements_per_task=12, batch=4)
    filters = FilterConfig(refine_ignores=("error", "invalid_grid"))
    tid = TASK_IDS[0]

    def drawn(experiment):
        return sorted((r["code_hash"], r["kind"], r["parent"]) for r in store.archive(experiment).get_task(tid))

    whole, _ = make_search(cfg, store, f"{experiment_name}-whole", engine, executor, filters=filters)
    asyncio.run(whole.run({tid: tasks[tid]}))
    batches = []

    def die_after_first_refinement(task_id, n):
        if n:
            batches.append(n)
            if len(batches) == 2:  # one sampling batch, then one refinement batch archived
                raise KeyboardInterrupt("simulated kill")

    first, _ = make_search(cfg, store, experiment_name, engine, executor, filters=filters,
                           on_progress=die_after_first_refinement)
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(first.run({tid: tasks[tid]}))
    assert store.archive(experiment_name).counters([f"it0:refined:{tid}"]) == [4]
    resumed, _ = make_search(cfg, store, experiment_name, engine, executor, filters=filters)
    asyncio.run(resumed.run({tid: tasks[tid]}))
    assert store.archive(experiment_name).counters([f"it0:refined:{tid}"]) == [12]
    assert drawn(experiment_name) == drawn(f"{experiment_name}-whole")


def test_a_chat_search_sends_user_messages_and_reads_the_fenced_answer(store, experiment_name, executor, tasks):
    """prompt_format=chat: every sampling and refinement prompt is one user message (the engine's
    chat template renders it), and the program comes out of the ```python block of the answer."""
    from common.sampling import Completion

    seen: list = []
    answer = "Here it is.\n```python\ndef transform(grid):\n    return [row[::-1] for row in grid[::-1]]\n```\n"

    async def canned(prompts, params):
        seen.extend(prompts)
        return [[Completion(answer, "stop", 10, 20, "v0") for _ in range(params.n)] for _ in prompts]

    cfg = search_cfg(prompt_style="numpy", prompt_format="chat", samples_per_task=4, refinements_per_task=2)
    search = SoarSearch(cfg, sampler=canned, verifier=local_verifier(executor), archive=store.archive(experiment_name),
                        model_version="v0")
    outcomes = asyncio.run(search.run({"3c9b0459": tasks["3c9b0459"]}))
    assert seen and all(isinstance(p, list) and len(p) == 1 and p[0]["role"] == "user" for p in seen)
    assert "Write a Python function `transform(grid)`" in seen[0][0]["content"]
    (cand,) = outcomes["3c9b0459"].candidates
    assert cand.code.startswith("def transform(grid):") and cand.train_accuracy == 1.0  # rot180 solves 3c9b0459
    assert outcomes["3c9b0459"].no_code == 0


def test_measure_from_skips_the_iterations_before_it_and_needs_measure_models():
    c = ControlsConfig(measure_models=True, measure_from=1)
    assert [c.measures(it) for it in range(3)] == [False, True, True]
    assert not ControlsConfig(measure_models=False, measure_from=0).measures(0)
    assert ControlsConfig(measure_models=True).measures(0)
    with pytest.raises(ValueError, match="measure_from"):
        ControlsConfig(measure_from=-1)
