"""The trained verifier: held-out questions, its rows are the sampler's own verdict prompts, a real
LoRA adapter trained and merged, and the scaling job checking with it (a tiny real model)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer

from common.sampling import Completion, render_prompt
from ray_jobs.scaling import ScalingConfig, run
from scaling.arith_problems import generated_problems
from scaling.sampling import SamplingPlan, ScalingSampler
from scaling.verifier_adapter import (
    TRAINING_QUESTIONS,
    VerifierRecipe,
    balanced,
    check_heldout,
    sample_candidates,
    train_adapter,
    training_questions,
    training_rows,
    verdict_rows,
)
from training import adapters
from training.common import ADAPTER_DIR


def test_training_questions_leave_out_every_heldout_question():
    recipe = VerifierRecipe()
    held = {r["question"] for r in generated_problems(recipe.dataset, recipe.heldout_questions,
                                                      seed=recipe.heldout_seed)}
    train = training_questions(recipe)
    texts = [q["question"] for q in train]
    assert len(texts) == len(set(texts)) > 20
    assert not held & set(texts)
    assert len(training_questions(replace(recipe, heldout_questions=1))) > len(train)  # the exclusion does work


def test_balanced_keeps_as_many_right_as_wrong_rows_per_question():
    rows = ([{"question": "a", "correct": True}] * 5 + [{"question": "a", "correct": False}] * 2
            + [{"question": "b", "correct": False}] * 4)
    out = balanced([dict(r, i=i) for i, r in enumerate(rows)], seed=0)
    a = [r for r in out if r["question"] == "a"]
    assert sum(r["correct"] for r in a) == 2 and len(a) == 4
    assert len([r for r in out if r["question"] == "b"]) == 1  # one kind only: one row, not four
    # a one-kind question first does not end the balancing of the questions after it
    later = balanced([dict(r, question="z" if r["question"] == "b" else "a") for r in rows[7:] + rows[:7]], seed=0)
    assert [len([r for r in later if r["question"] == q]) for q in ("z", "a")] == [1, 4]


class Recorder:
    """A generate that answers every prompt with a boxed 5, verdict 1 and comparison 1, recording prompts."""

    def __init__(self):
        self.prompts = []

    async def generate(self, prompts, params):
        self.prompts += list(prompts)
        text = " 1" if params.regex else "The answer is \\boxed{5}."
        return [[Completion(text, "stop", 1, 1) for _ in range(params.n)] for _ in prompts]


def test_training_rows_are_the_verdict_prompts_the_scaling_sampler_sends(store, experiment_name, untrained_model):
    """The adapter is trained on exactly the text it is asked at search time: record what the sampler
    sends the verifier in verdict=constrained mode and render it as an engine does."""
    tokenizer = AutoTokenizer.from_pretrained(untrained_model)
    questions = [{"id": "q0", "question": "What is 2 + 3?", "answer": "5"}]
    sampler_side, verifier_side = Recorder(), Recorder()
    plan = SamplingPlan(k_inf=2, k_verif=1, k_tie=0, compare_classes=2, temperature=1.0, verify_temperature=1.0,
                        max_tokens=8, verify_max_tokens=8, style="full", batch_questions=1, verdict="constrained",
                        verifier="v")
    asyncio.run(ScalingSampler(store.client, experiment_name, sampler_side.generate, plan,
                               verify_generate=verifier_side.generate).run(questions))
    assert len(sampler_side.prompts) == 1 and len(verifier_side.prompts) == 1  # candidates / verdicts, apart
    sent = render_prompt(tokenizer, verifier_side.prompts[0])
    [row] = verdict_rows([{"question": "What is 2 + 3?", "response": "The answer is \\boxed{5}.", "correct": True}],
                         tokenizer)
    assert row == {"prompt": sent, "completion": " 1"}
    with pytest.raises(ValueError, match=r"different \['verifier'\]"):  # another verifier's verdicts never mix in
        asyncio.run(ScalingSampler(store.client, experiment_name, sampler_side.generate, replace(plan, verifier="w"),
                                   verify_generate=verifier_side.generate).run(questions))


def test_a_heldout_check_refuses_questions_the_verifier_was_trained_on(tmp_path):
    (tmp_path / TRAINING_QUESTIONS).write_text(json.dumps(["What is 2 + 3?"]))
    check_heldout(str(tmp_path), ["What is 4 + 4?"])
    with pytest.raises(ValueError, match="trained on 1 of this experiment's questions"):
        check_heldout(str(tmp_path), ["What is 4 + 4?", "What is 2 + 3?"])


def test_candidates_are_labelled_by_the_reference_answer_with_the_recipes_sampling():
    recipe = VerifierRecipe(candidates=3, temperature=0.5, max_tokens=12, sample_seed=4)
    asked = []

    async def generate(prompts, params):
        asked.append((len(prompts), params.n, params.temperature, params.max_tokens))
        texts = ["so \\boxed{5}", "\\boxed{6}", "no idea"]
        return [[Completion(texts[i % 3], "stop", 1, 1) for i in range(params.n)] for _ in prompts]

    questions = [{"question": "What is 2 + 3?", "answer": "5"}, {"question": "What is 3 + 3?", "answer": "6"}]
    rows = asyncio.run(sample_candidates(recipe, generate, questions))
    assert asked == [(2, 3, 0.5, 12)]
    assert [(r["question"][8:13], r["response"], r["correct"]) for r in rows] == [
        ("2 + 3", "so \\boxed{5}", True), ("2 + 3", "\\boxed{6}", False), ("2 + 3", "no idea", False),
        ("3 + 3", "so \\boxed{5}", False), ("3 + 3", "\\boxed{6}", True), ("3 + 3", "no idea", False)]
    assert all(r["answer"] == q["answer"] for r, q in zip(rows, [q for q in questions for _ in range(3)], strict=True))


def test_training_rows_balance_when_the_recipe_says_so_and_leave_out_long_rows(untrained_model):
    tokenizer = AutoTokenizer.from_pretrained(untrained_model)
    cands = ([{"question": "What is 2 + 3?", "response": f"\\boxed{{{5 + i}}}", "correct": i == 0} for i in range(4)]
             + [{"question": "What is 1 + 1?", "response": "x" * 400, "correct": True}])
    kept = training_rows(VerifierRecipe(max_length=10_000), cands, tokenizer)
    assert sorted(r["completion"] for r in kept) == [" 0", " 1", " 1"]  # 1 right, 1 of 3 wrong, the one-kind question
    every = training_rows(VerifierRecipe(balance=False, max_length=10_000), cands, tokenizer)
    assert len(every) == 5
    lengths = sorted(len(tokenizer(r["prompt"] + r["completion"])["input_ids"]) for r in every)
    short = training_rows(VerifierRecipe(balance=False, max_length=lengths[-2]), cands, tokenizer)
    assert len(short) == 4 and all("x" * 400 not in r["prompt"] for r in short)  # a row at the limit stays


@pytest.fixture(scope="module")
def tiny_adapter(tmp_path_factory, untrained_model) -> Path:
    """A real LoRA adapter trained for a few steps on the untrained model's verdict rows."""
    out = tmp_path_factory.mktemp("adapter")
    recipe = VerifierRecipe(base=untrained_model, batch_size=4, epochs=2, learning_rate=1e-2, lora_r=4, lora_alpha=8,
                            max_length=1024)
    cands = [{"question": f"What is {a} + 1?", "answer": str(a + 1), "response": f"\\boxed{{{a + 1 + w}}}",
              "correct": not w} for a in range(4) for w in (0, 1)]
    result = train_adapter(recipe, cands, untrained_model, str(out / "trained"))
    adapter = Path(result.checkpoint) / ADAPTER_DIR
    (adapter / TRAINING_QUESTIONS).write_text(json.dumps(sorted({c["question"] for c in cands})))
    return adapter


def test_the_adapter_merges_into_its_base_once(tiny_adapter, untrained_model, ratchet_home):
    assert adapters.is_adapter(tiny_adapter) and adapters.base_of(tiny_adapter) == untrained_model
    assert (tiny_adapter / adapters.ADAPTER_WEIGHTS).stat().st_size < 1_000_000  # the adapter, not a model
    merged = adapters.merged_checkpoint(tiny_adapter, home=ratchet_home)
    trained = load_file(str(tiny_adapter.parent / "model.safetensors"))  # the training's own merge
    again = load_file(str(Path(merged) / "model.safetensors"))
    base = load_file(str(Path(untrained_model) / "model.safetensors"))
    name = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(again[name], base[name])
    assert torch.allclose(again[name], trained[name], atol=1e-6)
    stamp = (Path(merged) / adapters.DONE).stat().st_mtime_ns
    assert adapters.merged_checkpoint(tiny_adapter, home=ratchet_home) == merged
    assert (Path(merged) / adapters.DONE).stat().st_mtime_ns == stamp  # reused, not merged again


def test_the_scaling_job_verifies_with_the_adapter(tiny_adapter, store, experiment_name, tmp_path, monkeypatch,
                                                   ratchet_home):
    monkeypatch.setenv("RATCHET_HOME", str(ratchet_home))
    cfg = ScalingConfig(
        experiment=experiment_name, runs_dir=str(tmp_path), mode="curves", dataset="sum1-small", questions=3,
        arith_seed=1000, model=adapters.base_of(tiny_adapter), verifier=str(tiny_adapter), in_process=True,
        prompt_style="full", verdict="constrained", k_inf=2, k_verif=1, k_tie=0, max_tokens=6, verify_max_tokens=6,
        batch_questions=3)
    cfg.curves.seeds, cfg.curves.bootstrap = 2, 10
    summary = run(cfg)
    assert summary["verifier"] == adapters.merged_checkpoint(tiny_adapter, home=ratchet_home)
    assert "verdicts and comparisons from the verifier" in (tmp_path / experiment_name / "report.md").read_text()
    (tiny_adapter / TRAINING_QUESTIONS).write_text(json.dumps([generated_problems("sum1-small", 1, 1000)[0]["question"]]))
    with pytest.raises(ValueError, match="trained on 1 of this experiment's questions"):
        run(replace(cfg, experiment=experiment_name + "-b"))


def test_the_answer_view_shows_the_final_answer_alone():
    from verifiers.selfverify import verify_prompt

    [msg] = verify_prompt("What is 2 + 3?", "First 2 + 3 = 6, no wait.\n\\boxed{5}", "full", "answer")
    assert "Proposed final answer: 5" in msg["content"] and "no wait" not in msg["content"]
    assert "Proposed final answer: none" in verify_prompt("What is 2 + 3?", "I do not know", "full", "answer")[0]["content"]
    assert verify_prompt("What is 2 + 3?", "\\boxed{5}", "compact", "answer") == "Q: What is 2 + 3?\nA: 5\nCheck:"
    with pytest.raises(ValueError, match="view"):
        verify_prompt("q", "r", "full", "both")
