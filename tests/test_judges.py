"""Judges: each scores the response alone; bad verdicts are recorded; Bradley-Terry from both orders."""

from __future__ import annotations

import asyncio
import dataclasses
import math

import numpy as np
import pytest

from common.sampling import Completion
from thinking.loop import judge_items
from thinking.pairs import Sample
from verifiers.judges import JudgeItem, Verdict, make_judge
from verifiers.judges.pairwise import bradley_terry, parse_choice

SECRET = "ZQXSECRETTHOUGHT"
INSTRUCTIONS = [{"id": "a", "instruction": "3+4", "reference": "7"}, {"id": "b", "instruction": "9-2", "reference": "7"}]


def samples_with_secret_thoughts() -> list[list[Sample]]:
    return [[Sample(completion=f" {SECRET} step. So: {v}", thought=f"{SECRET} step.", response=str(v), parsed=True)
             for v in (7, 8, 6)] for _ in INSTRUCTIONS]


def test_judge_items_have_no_place_for_a_thought():
    assert "thought" not in {f.name for f in dataclasses.fields(JudgeItem)}
    items = judge_items(INSTRUCTIONS, samples_with_secret_thoughts())
    assert len(items) == 6 and not any(SECRET in repr(i) for i in items)
    with pytest.raises(TypeError, match="JudgeItem.response"):
        JudgeItem("q", Sample("c", "t", "r", True))  # a whole sample (with its thought) is refused


class RecordingGenerate:
    """A judge LLM stub that records every prompt and prefers the response '7', in either position."""

    def __init__(self, reply=None):
        self.prompts: list[str] = []
        self.reply = reply

    async def __call__(self, prompts, params):
        self.prompts += list(prompts)
        out = []
        for p in prompts:
            a = p.split("Response A: ")[1].split("\n")[0]
            text = self.reply(p) if self.reply else ("A" if a == "7" else "B")
            out.append([Completion(text, "stop", 1, 1)])
        return out


def tiny_classifier(tmp_path, arch: str = "seq"):
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

    from training.tokenizer import train_tokenizer

    tok = train_tokenizer(["3+4 7 8 6 9-2 step So:"], 259)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_labels=1, pad_token_id=tok.pad_token_id)
    model = (LlamaForSequenceClassification if arch == "seq" else LlamaForCausalLM)(cfg)
    path = tmp_path / arch
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def test_no_judge_ever_sees_the_thought(tmp_path):
    items = judge_items(INSTRUCTIONS, samples_with_secret_thoughts())
    # programmatic
    assert [v.score for v in asyncio.run(make_judge("programmatic").score(items))] == [1.0, 0.0, 0.0] * 2
    # pairwise LLM: everything the judge model is sent
    gen = RecordingGenerate()
    asyncio.run(make_judge("pairwise", generate=gen).score(items))
    assert gen.prompts and not any(SECRET in p for p in gen.prompts)
    # reward model: every text its tokenizer encodes
    rm = make_judge("reward_model", checkpoint=tiny_classifier(tmp_path))
    seen = []
    tokenize = rm.tokenizer.__call__

    class Spy:
        def __getattr__(self, name):
            return getattr(rm.tokenizer_real, name)

        def __call__(self, texts, **kw):
            seen.extend(texts)
            return tokenize(texts, **kw)

    rm.tokenizer_real, rm.tokenizer = rm.tokenizer, Spy()
    verdicts = asyncio.run(rm.score(items))
    assert len(seen) == 6 and not any(SECRET in t for t in seen) and all(v.ok for v in verdicts)


def test_pairwise_runs_both_orders_and_cancels_position_bias():
    items = [JudgeItem("q", r, group="g") for r in ("7", "8", "6")]
    gen = RecordingGenerate()
    verdicts = asyncio.run(make_judge("pairwise", generate=gen).score(items))
    assert len(gen.prompts) == 6  # 3 pairs x both orders
    scores = [v.score for v in verdicts]
    assert scores[0] == max(scores) and scores[1] == pytest.approx(scores[2])
    # a judge that always says "A" learns nothing about the responses: equal scores
    biased = RecordingGenerate(reply=lambda p: "A")
    flat = [v.score for v in asyncio.run(make_judge("pairwise", generate=biased).score(items))]
    assert np.allclose(flat, flat[0])


def test_unparsable_verdicts_are_recorded():
    items = [JudgeItem("q", r, group="g") for r in ("7", "8")]
    gen = RecordingGenerate(reply=lambda p: "I think both are fine")
    verdicts = asyncio.run(make_judge("pairwise", generate=gen).score(items))
    assert all(not v.ok and v.score is None and v.error == "unparsable verdict" for v in verdicts)
    assert parse_choice(" B.") == 1 and parse_choice("Response A") == 0 and parse_choice("maybe") is None


def test_nan_score_is_a_failed_verdict():
    v = Verdict.of(float("nan"))
    assert not v.ok and v.score is None and v.error == "nan score"
    assert Verdict.of(0.5).ok


def test_bradley_terry_orders_by_wins():
    wins = np.array([[0, 2, 2], [0, 0, 2], [0, 0, 0]], dtype=float)
    s = bradley_terry(3, wins)
    assert s[0] > s[1] > s[2] and all(math.isfinite(x) for x in s)


def test_reward_model_checkpoint_must_be_a_sequence_classifier(tmp_path):
    with pytest.raises(ValueError, match="judge.checkpoint=.* is not a sequence classifier"):
        make_judge("reward_model", checkpoint=tiny_classifier(tmp_path, arch="causal"))
    with pytest.raises(ValueError, match="judge.checkpoint=.* no config.json"):
        make_judge("reward_model", checkpoint=str(tmp_path / "missing"))


def test_unknown_judge_lists_the_known_ones():
    with pytest.raises(ValueError, match="choose one of"):
        make_judge("vibes")


@pytest.mark.slow
def test_reward_model_trained_with_trl_ranks_heldout_responses(tmp_path_factory, tmp_path):
    """TRL's RewardTrainer on digit-map preferences -> a reward_model judge that prefers the right answer."""
    import random

    from _models import DIGIT_MAP, build_models

    from training.reward import RewardJobConfig, train_reward

    def rows(seed, n):
        rng = random.Random(seed)
        out = []
        for _ in range(n):
            digits = [rng.randrange(10) for _ in range(rng.randint(3, 6))]
            out.append(("map " + " ".join(map(str, digits)) + " =>", DIGIT_MAP[digits[-1]],
                        DIGIT_MAP[(digits[-1] + rng.randint(1, 9)) % 10]))
        return out

    from transformers import AutoTokenizer

    from verifiers.judges.reward_model import render

    base = build_models(tmp_path_factory)["trained"]
    tok = AutoTokenizer.from_pretrained(base)
    train = [{"chosen": render(tok, JudgeItem(p, good)), "rejected": render(tok, JudgeItem(p, bad))}
             for p, good, bad in rows(1, 256)]
    result = train_reward(RewardJobConfig(model_path=base,
                                          output_dir=str(tmp_path / "rm"), max_steps=60, learning_rate=1e-3,
                                          per_device_train_batch_size=32, max_length=64, disable_tqdm=True,
                                          quiet=True), train)
    judge = make_judge("reward_model", checkpoint=result.checkpoint)
    held = rows(2, 64)
    items = [JudgeItem(p, r) for p, good, bad in held for r in (good, bad)]
    v = asyncio.run(judge.score(items))
    wins = [v[2 * i].score > v[2 * i + 1].score for i in range(len(held))]
    assert all(x.ok for x in v) and sum(wins) / len(wins) > 0.7, sum(wins) / len(wins)
