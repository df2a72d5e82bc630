"""DPO on TPO pairs (real TRL, a real tiny model) raises the chosen-over-rejected margin on held-out pairs."""

from __future__ import annotations

import random

import pytest
from _models import DIGIT_MAP, build_models

from thinking.pairs import Group, PairsConfig, Sample, build_pairs, trl_rows


def groups(seed: int, n: int) -> list[Group]:
    """Digit-map prompts whose correct answer scores 1 and a wrong one 0, as judged samples."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        digits = [rng.randrange(10) for _ in range(rng.randint(3, 6))]
        good = DIGIT_MAP[digits[-1]]
        bad = DIGIT_MAP[(digits[-1] + 1) % 10]
        prompt = "map " + " ".join(map(str, digits)) + " =>"
        out.append(Group(f"{seed}-{i}", prompt, [Sample(f" {good}", "", good, True, 1.0),
                                                 Sample(f" {bad}", "", bad, True, 0.0)]))
    return out


def logp(model, tokenizer, prompt: str, completion: str) -> float:
    import torch

    p = tokenizer(prompt, return_tensors="pt").input_ids
    full = tokenizer(prompt + completion, return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(full).logits.log_softmax(-1)
    targets = full[0, p.shape[1]:]
    return float(logits[0, p.shape[1] - 1:-1].gather(-1, targets[:, None]).sum())


def implicit_margin(policy: str, reference: str, rows: list[dict]) -> float:
    """Mean of [log pi(c)/ref(c)] - [log pi(r)/ref(r)] over rows (DPO's reward margin / beta)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(reference)
    pol, ref = (AutoModelForCausalLM.from_pretrained(x).eval() for x in (policy, reference))
    total = 0.0
    for r in rows:
        total += (logp(pol, tok, r["prompt"], r["chosen"]) - logp(ref, tok, r["prompt"], r["chosen"])
                  - logp(pol, tok, r["prompt"], r["rejected"]) + logp(ref, tok, r["prompt"], r["rejected"]))
    return total / len(rows)


@pytest.mark.slow
def test_dpo_on_pairs_raises_heldout_margin(tmp_path_factory, tmp_path):
    from training.dpo import DPOJobConfig, train_dpo

    seed_model = build_models(tmp_path_factory)["trained"]
    train, _ = build_pairs(groups(1, 64), 0.0, PairsConfig())
    heldout, _ = build_pairs(groups(2, 32), 0.0, PairsConfig())
    assert len(train) == 64 and len(heldout) == 32
    before = implicit_margin(seed_model, seed_model, trl_rows(heldout))
    result = train_dpo(DPOJobConfig(model_path=seed_model, output_dir=str(tmp_path / "dpo"), max_steps=20,
                                    learning_rate=1e-3, beta=0.1, per_device_train_batch_size=16,
                                    max_length=64, disable_tqdm=True, quiet=True), trl_rows(train))
    after = implicit_margin(result.checkpoint, seed_model, trl_rows(heldout))
    assert before == pytest.approx(0.0, abs=1e-4) and after > 0.5, (before, after)


def test_sft_weight_adds_an_nll_term_on_chosen_and_refuses_negative_weights():
    from thinking.config import TrainConfig
    from thinking.learn import dpo_loss
    from training.dpo import DPOJobConfig

    assert dpo_loss(0.0) == {}  # plain DPO, as the paper trains
    job = DPOJobConfig(model_path="x", output_dir="/tmp/x", **dpo_loss(0.5))
    assert job.loss_type == ["sigmoid", "sft"] and job.loss_weights == [1.0, 0.5]
    with pytest.raises(ValueError, match="train.sft_weight"):
        TrainConfig(sft_weight=-1.0)


def test_divergence_windows_move_the_common_prefix_into_the_prompt():
    from thinking.pairs import at_divergence

    prompt = "Q: 9+5-1+6\nWork:"
    chosen, rejected = " 9+5=14. 14-1=13. 13+6=19. So: 19", " 9+5=14. 14-1=12. 12+6=18. So: 18"
    assert at_divergence(prompt, chosen, rejected, 1) == (prompt + " 9+5=14. ", "14-1=13.", "14-1=12.")
    assert at_divergence(prompt, chosen, rejected, 2)[1:] == ("14-1=13. 13+6=19.", "14-1=12. 12+6=18.")
    assert at_divergence(prompt, " 7", " 8", 1) == (prompt + " ", "7", "8")  # a direct answer: the whole of it
    assert at_divergence(prompt, " 1 2", " 1 2", 1) is None  # no difference, no pair
    assert at_divergence("P:", "ans\t5", "ans\t6", 1) == ("P:ans\t", "5", "6")  # any whitespace ends a word
    pairs = [{"prompt": prompt, "chosen": chosen, "rejected": rejected}, {"prompt": prompt, "chosen": " 1", "rejected": " 1"}]
    assert trl_rows(pairs, divergence_words=1) == [{"prompt": prompt + " 9+5=14. ", "chosen": "14-1=13.",
                                                    "rejected": "14-1=12."}]
    assert trl_rows(pairs[:1]) == [{"prompt": prompt, "chosen": chosen, "rejected": rejected}]  # default: whole
    with pytest.raises(ValueError, match="divergence_words needs plain-text prompts"):
        trl_rows([{"prompt": [{"role": "user", "content": "hi"}], "chosen": "a", "rejected": "b"}], 1)
    with pytest.raises(ValueError, match="pairs.divergence_words"):
        PairsConfig(divergence_words=-1)


def test_windows_cut_mid_thought_are_not_ended_with_eos(tmp_path_factory, tmp_path):
    """TRL appends EOS to plain-text completions; a window that stops mid-thought must not
    teach the model to stop there (completion_eos=False takes it off), whole completions keep it."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training.dpo import DPOJobConfig, _NoEosDPOTrainer

    path = build_models(tmp_path_factory)["trained"]
    tok = AutoTokenizer.from_pretrained(path)
    rows = trl_rows(build_pairs(groups(3, 4), 0.0, PairsConfig())[0], divergence_words=1)

    def prepared(cls, completion_eos: bool) -> list[list[int]]:
        args = DPOJobConfig(model_path=path, output_dir=str(tmp_path / str(completion_eos)), max_length=64,
                            completion_eos=completion_eos, report_to="none")
        trainer = cls(model=AutoModelForCausalLM.from_pretrained(path), args=args,
                      train_dataset=Dataset.from_list(rows), processing_class=tok)
        return list(trainer.train_dataset["chosen_ids"]) + list(trainer.train_dataset["rejected_ids"])

    from trl import DPOTrainer

    assert all(ids[-1] == tok.eos_token_id for ids in prepared(DPOTrainer, True))
    cut = prepared(_NoEosDPOTrainer, False)
    assert cut and all(ids and tok.eos_token_id not in ids for ids in cut)
