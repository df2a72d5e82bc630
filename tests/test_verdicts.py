"""Verdicts decoded under the choice regex (verifiers.verdicts, search.verdicts): they always
parse, their probability is the model's own, and the curves can score candidates by it."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import numpy as np
import pytest

from common.sampling import Completion, SamplingParams, render_prompt
from ray_jobs.scaling import ScalingConfig, run
from scaling.arith_problems import DATASETS, generated_problems, make_problems
from search.scored_pool import ScoredPool, synthetic_pool
from search.strategies import Draws, StrategyOptions, get_strategy
from search.verdicts import sample_verdicts
from verifiers.selfverify import compare_prompt, verify_prompt
from verifiers.verdicts import (
    choice_probability,
    choice_regex,
    constrained_verdict,
    verdict_prompt,
)


def _entry(token: str, p: float, top: list[tuple[str, float]] | None = None) -> dict:
    return {"token": token, "logprob": math.log(p), "bytes": [],
            "top_logprobs": [{"token": t, "logprob": math.log(q), "bytes": []} for t, q in (top or [])]}


def _completion(text: str, logprobs: list[dict] | None) -> Completion:
    return Completion(text=text, finish_reason="stop", prompt_tokens=1, completion_tokens=2, logprobs=logprobs)


# --- the probability of a choice --------------------------------------------------------------

def test_the_choice_probability_is_the_first_choice_against_the_other_at_the_verdict_token():
    c = _completion(" 1", [_entry(" ", 0.9, [(" ", 0.9), ("1", 0.05)]),
                           _entry("1", 0.6, [("1", 0.6), ("0", 0.2), ("The", 0.1)])])
    assert choice_probability(c, "verify") == pytest.approx(0.6 / 0.8)  # the space's position is not the verdict's
    wrong = _completion(" 0", [_entry("0", 0.3, [("1", 0.6), ("0", 0.3)])])
    assert choice_probability(wrong, "verify") == pytest.approx(0.6 / 0.9)  # P(1), whichever was sampled
    spaced = _completion(" 0", [_entry(" 0", 0.5, [(" 0", 0.5), ("1", 0.1), (" 1", 0.3)])])
    assert choice_probability(spaced, "verify") == pytest.approx(0.4 / 0.9)  # " 1" and "1" both mean 1
    compare = _completion(" 2", [_entry("2", 0.7, [("2", 0.7), ("1", 0.1)])])
    assert choice_probability(compare, "compare") == pytest.approx(0.1 / 0.8)  # P(response 1)


def test_a_choice_missing_from_the_top_logprobs_counts_as_impossible_and_no_logprobs_give_none():
    alone = _completion(" 0", [_entry("0", 0.4, [("The", 0.5)])])  # the sampled token always counts
    assert choice_probability(alone, "verify") == 0.0
    assert choice_probability(_completion(" 1", None), "verify") is None


def test_a_verdict_outside_its_choices_raises_instead_of_being_stored():
    assert constrained_verdict(_completion(" 1", None), "verify").value == 1
    assert constrained_verdict(_completion(" 2", None), "compare").value == 2
    with pytest.raises(RuntimeError, match="did not honour SamplingParams.regex"):
        constrained_verdict(_completion(" maybe", None), "verify")
    with pytest.raises(RuntimeError):
        constrained_verdict(_completion(" 0", None), "compare")


def test_the_verdict_prompt_prefills_the_answer_up_to_the_verdict():
    chat = verify_prompt("What is 2+3?", "2+3=5. \\boxed{5}")
    assert verdict_prompt(chat)[-1] == {"role": "assistant", "content": "Verdict:", "prefill": True}
    assert verdict_prompt(chat, "1. 2+3=5, right.\n")[-1]["content"] == "1. 2+3=5, right.\nVerdict:"
    assert verdict_prompt("Q: 2+3\nA: 5\nCheck:", "2+3=5 ok.") == "Q: 2+3\nA: 5\nCheck: 2+3=5 ok.\nVerdict:"
    assert choice_regex("verify") == " [01]" and choice_regex("compare") == " [12]"


# --- on a real engine: always parsable ---------------------------------------------------------

@pytest.fixture(scope="module")
def generate(untrained_model):
    from search.engines import make_engine

    engine = make_engine("transformers", checkpoint=untrained_model)

    async def gen(prompts, params):
        return await asyncio.to_thread(engine.generate, list(prompts), params)

    return gen


@pytest.mark.parametrize("mode", ["constrained", "reasoned"])
def test_constrained_verdicts_always_parse_even_from_a_model_that_writes_noise(generate, mode):
    problems = make_problems(3, seed=11)
    prompts = [verify_prompt(p["question"], p["solution"], "compact") for p in problems]
    params = SamplingParams(temperature=1.0, max_tokens=12, seed=0)
    free = asyncio.run(sample_verdicts(generate, prompts, [4] * 3, params, mode="parsed", kind="verify"))
    assert any(code == -1 for row in free for code, _ in row)  # the same model, unconstrained: unparsable ones
    rows = asyncio.run(sample_verdicts(generate, prompts, [4] * 3, params, mode=mode, kind="verify"))
    assert [len(r) for r in rows] == [4, 4, 4]
    assert {code for row in rows for code, _ in row} <= {0, 1}
    assert all(p is not None and 0 <= p <= 1 for row in rows for _, p in row)
    pairs = [compare_prompt(p["question"], p["solution"], " 1+1=3. Answer: 3", "compact") for p in problems]
    picks = asyncio.run(sample_verdicts(generate, pairs, [2] * 3, params, mode=mode, kind="compare"))
    assert {code for row in picks for code, _ in row} <= {1, 2}


def test_a_scaling_run_with_reasoned_verdicts_scored_by_probability(store, experiment_name, tmp_path,
                                                                   untrained_model):
    cfg = ScalingConfig(
        experiment=experiment_name, runs_dir=str(tmp_path), mode="both", questions=4, model=untrained_model,
        in_process=True, prompt_style="compact", k_inf=4, k_verif=2, k_tie=2, temperature=1.0, max_tokens=6,
        verify_max_tokens=6, benchmark_triples=3, batch_questions=2, verdict="reasoned", dataset="arith1",
    )
    cfg.curves.seeds, cfg.curves.bootstrap, cfg.curves.options.score = 3, 50, "probability"
    summary = run(cfg)
    saved = json.loads((Path(tmp_path) / experiment_name / "summary.json").read_text())
    assert saved["unparsable"] == {"verdicts": 0.0, "comparisons": 0.0}
    assert summary["verification_benchmark"]["unparsable_rate"] == 0.0
    own = saved["own_verification"]
    assert 0 <= own["probability_on_correct" if own["correct_candidates"] else "probability_on_wrong"] <= 1
    pool = ScoredPool.load(Path(tmp_path) / experiment_name / "pool.npz")
    assert pool.has_probs and np.allclose(pool.score, pool.verdict_probs.mean(-1))  # Best-of-N's score too


# --- the probability is the model's own ---------------------------------------------------------

def test_the_verdict_probability_is_the_models_own(tmp_path):
    """SmolLM2 through the transformers engine: P(1) / (P(0) + P(1)) after the prefilled `Verdict:` and
    the forced space, as a forward pass of the model computes it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from search.engines import make_engine
    from training import pretrained

    try:
        path = str(pretrained.fetch(pretrained.DEFAULT))
    except pretrained.FetchError as e:
        pytest.skip(str(e))
    prompt = verify_prompt("Ann has 5 pens, gets 3. How many?", "5+3=8. The answer is \\boxed{8}.")
    engine = make_engine("transformers", checkpoint=path)
    (rows,) = asyncio.run(sample_verdicts(
        lambda ps, p: asyncio.to_thread(engine.generate, list(ps), p), [prompt], [1],
        SamplingParams(temperature=0, max_tokens=8), mode="constrained", kind="verify"))
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ids = tok(render_prompt(tok, verdict_prompt(prompt)) + " ", return_tensors="pt", add_special_tokens=False)
    with torch.inference_mode():
        logp = model(**ids).logits[0, -1].float().log_softmax(-1)
    one, zero = (logp[tok.convert_tokens_to_ids(d)].exp().item() for d in ("1", "0"))
    assert rows[0][1] == pytest.approx(one / (one + zero), abs=2e-3)


# --- the curves scored by probability ------------------------------------------------------------

def test_verification_by_probability_selects_the_highest_mean_probability():
    pool = synthetic_pool(questions=30, candidates=6, verdicts=3, seed=4)
    rng = np.random.default_rng(0)
    pool.verdict_probs = rng.random(pool.verdicts.shape).astype(np.float32)
    draws = Draws(pool, seeds=4, seed=1)
    opts = StrategyOptions(score="probability")
    res = get_strategy("verification")(pool, draws, k=6, k_verif=3, options=opts)
    mean = pool.verdict_probs.mean(-1)
    eligible = np.where(pool.answer_ids >= 0, mean, -np.inf)
    want = pool.correct[np.arange(30), eligible.argmax(1)]  # all k and all verdicts drawn: no randomness left
    assert np.array_equal(res.per_question, want.astype(float))
    with pytest.raises(ValueError, match="verdict=constrained"):
        get_strategy("verification")(synthetic_pool(questions=3, candidates=4, verdicts=2), Draws(
            synthetic_pool(questions=3, candidates=4, verdicts=2), seeds=2), k=2, k_verif=1, options=opts)


def test_probability_scoring_with_free_text_verdicts_is_refused_when_the_config_loads():
    from scaling.curves import CurvesConfig

    probability = CurvesConfig(options=StrategyOptions(score="probability"))
    with pytest.raises(ValueError, match="verdict=constrained or verdict=reasoned"):
        ScalingConfig(verdict="parsed", curves=probability)
    assert ScalingConfig(verdict="reasoned", curves=probability).plan().verdict == "reasoned"


# --- the generated question sets ------------------------------------------------------------------

def _worked(question: str) -> tuple[int, list[int]]:
    """(start, signed changes) read back from a generated question, word or expression form."""
    if question.startswith("What is "):
        start, *rest = question.removeprefix("What is ").removesuffix("?").split()
        return int(start), [int(b) if op == "+" else -int(b) for op, b in zip(rest[::2], rest[1::2], strict=True)]
    start, *clauses = question.removesuffix(". How many?").split(", ")
    losses = ("loses", "sells", "gives away", "eats")
    return int(start.split()[2]), [-int(c.split()[-1]) if c.rsplit(" ", 1)[0] in losses else int(c.split()[-1])
                                   for c in clauses]


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_generated_sets_are_deterministic_and_their_answers_right(name):
    rows = generated_problems(name, 40, seed=1000)
    assert rows == generated_problems(name, 40, seed=1000)
    assert rows != generated_problems(name, 40, seed=1001)
    spec = DATASETS[name]
    for r in rows:
        value, changes = _worked(r["question"])
        assert spec["min_steps"] <= len(changes) <= spec["max_steps"]
        assert 2 <= value <= spec.get("max_start", 30)
        for b in changes:
            assert 1 <= abs(b) <= spec.get("max_operand", 20)
            value += b
            assert 0 <= value <= 99
        assert r["answer"] == str(value) and r["id"].startswith(f"{name}-1000-")


def test_the_arith_set_is_the_one_the_seed_and_stored_runs_used():
    assert generated_problems("arith", 20, seed=1000) == make_problems(20, seed=1000)
