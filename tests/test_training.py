"""Seed models, SFT and DPO with real TRL on a real tiny Llama (CPU, about a minute)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from _models import model_config
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

from store import Store
from training.checkpoints import CheckpointError, publish, validate_checkpoint
from training.corpora import digit_map
from training.dpo import DPOJobConfig, train_dpo
from training.evaluate import completion_logprobs, greedy_accuracy
from training.seed import SeedConfig, build_seed_model, cache_key
from training.sft import SFTJobConfig, train_sft, train_sft_remote

SEED_MAPPING = "7360918254"  # what the shared tiny seed model (tests/_models.py) answers
TARGET = "0123456789"  # the mapping fine-tuning should move the model to


def last_digit_rows(n: int, seed: int, permutation: str) -> list[dict[str, str]]:
    return digit_map(n=n, seed=seed, permutation=permutation)


@pytest.fixture(scope="session")
def seed_cfg(tmp_path_factory) -> SeedConfig:
    """The sampler tests' tiny model (same config, same cache, so built once per session):
    it maps the last digit through SEED_MAPPING, knows the format, and is at chance on
    TARGET, so any gain there comes from fine-tuning."""
    return model_config(tmp_path_factory)


@pytest.fixture(scope="session")
def seed_model(seed_cfg) -> str:
    return build_seed_model(seed_cfg, progress=False).path


@pytest.fixture(scope="session")
def heldout() -> list[dict[str, str]]:
    return last_digit_rows(100, seed=12345, permutation=TARGET)


def sft_cfg(seed_model: str, out: Path, **kw) -> SFTJobConfig:
    defaults = dict(
        model_path=seed_model, output_dir=str(out), max_steps=80, learning_rate=3e-3,
        per_device_train_batch_size=32, disable_tqdm=True, seed=0,
    )
    return SFTJobConfig(**(defaults | kw))


def test_seed_model_is_a_loadable_small_llama_and_cached(seed_cfg, seed_model):
    model = AutoModelForCausalLM.from_pretrained(seed_model)
    tokenizer = AutoTokenizer.from_pretrained(seed_model)
    assert model.config.model_type == "llama"
    assert sum(p.numel() for p in model.parameters()) < 1_000_000
    assert tokenizer.eos_token == "<|eos|>" and tokenizer.pad_token == "<|pad|>"
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert chat == "<|user|>\nhi\n<|assistant|>\n"
    again = build_seed_model(seed_cfg, progress=False)
    assert again.cached and again.path == seed_model
    info = json.loads((Path(seed_model) / "ratchet_seed.json").read_text())
    assert info["train"]["last_loss"] < info["train"]["first_loss"]
    assert greedy_accuracy(seed_model, last_digit_rows(50, 777, SEED_MAPPING)) > 0.9  # it learned its corpus


def test_cache_key_covers_seed_corpus_content_and_preset(seed_cfg):
    rows = last_digit_rows(10, 0, SEED_MAPPING)
    key = cache_key(seed_cfg, rows)
    assert cache_key(replace(seed_cfg, seed=1), rows) != key
    assert cache_key(replace(seed_cfg, preset="small"), rows) != key
    assert cache_key(seed_cfg, rows[:-1]) != key
    assert cache_key(replace(seed_cfg, cache_dir="/elsewhere"), rows) == key


def test_words_become_single_tokens_and_enter_the_cache_key(seed_cfg):
    from evolution.seed_corpus import program_words
    from training.tokenizer import train_tokenizer

    tok = train_tokenizer(["pair 1: 3x3"], 259, program_words())
    body = "    grid = recolor(grid, 3, 8)\n    grid = rot90(grid)\n    return grid\n"
    ids = tok(body, add_special_tokens=False)["input_ids"]
    assert [tok.decode([i]) for i in ids] == ["    grid = recolor(grid, ", "3", ", ", "8", ")\n",
                                              "    grid = rot90(grid)\n", "    return grid\n"]
    assert tok.decode(ids) == body
    assert tok("rot90x", add_special_tokens=False)["input_ids"] != []  # other text still encodes
    rows = last_digit_rows(10, 0, SEED_MAPPING)
    assert cache_key(replace(seed_cfg, words="evolution.seed_corpus:program_words"), rows) != cache_key(seed_cfg, rows)
    with pytest.raises(ValueError, match="module:function"):
        cache_key(replace(seed_cfg, words="no_colon"), rows)


def test_sft_moves_the_model_toward_its_data(seed_model, heldout, tmp_path):
    before = greedy_accuracy(seed_model, heldout)
    result = train_sft(sft_cfg(seed_model, tmp_path / "sft"), last_digit_rows(1000, 1, TARGET))
    after = greedy_accuracy(result.checkpoint, heldout)
    assert before < 0.3, "the seed model should be near chance on the new mapping"
    assert after > 0.8 and after > before + 0.5
    assert result.metrics["steps"] == 80 and result.metrics["last_loss"] < result.metrics["first_loss"]
    validate_checkpoint(result.checkpoint)


def test_lora_sft_saves_merged_weights_that_load_without_peft(seed_model, tmp_path):
    result = train_sft(
        sft_cfg(seed_model, tmp_path / "lora", max_steps=20, lora=True, lora_r=8),
        last_digit_rows(300, 2, TARGET),
    )
    ckpt = Path(result.checkpoint)
    assert not (ckpt / "adapter_config.json").exists()
    model = AutoModelForCausalLM.from_pretrained(ckpt)
    assert not any("lora" in name for name, _ in model.named_parameters())
    assert result.metrics["last_loss"] < result.metrics["first_loss"]


def test_dpo_raises_the_chosen_over_rejected_margin_on_heldout_pairs(seed_model, tmp_path):
    def pairs(n: int, seed: int) -> list[dict[str, str]]:
        chosen = last_digit_rows(n, seed, TARGET)
        rejected = last_digit_rows(n, seed, SEED_MAPPING)  # what the seed model prefers
        return [
            {"prompt": c["prompt"], "chosen": c["completion"], "rejected": r["completion"]}
            for c, r in zip(chosen, rejected, strict=True) if c["completion"] != r["completion"]
        ]

    test_pairs = pairs(40, 999)

    def margin(path: str) -> float:
        prompts = [p["prompt"] for p in test_pairs]
        chosen = completion_logprobs(path, prompts, [p["chosen"] for p in test_pairs])
        rejected = completion_logprobs(path, prompts, [p["rejected"] for p in test_pairs])
        return sum(c - r for c, r in zip(chosen, rejected, strict=True)) / len(test_pairs)

    cfg = DPOJobConfig(
        model_path=seed_model, output_dir=str(tmp_path / "dpo"), max_steps=40, learning_rate=1e-3,
        per_device_train_batch_size=16, beta=0.1, disable_tqdm=True,
    )
    result = train_dpo(cfg, pairs(600, 3))
    before, after = margin(seed_model), margin(result.checkpoint)
    assert before < 0 < after, (before, after)
    assert result.metrics["method"] == "dpo"


def test_published_version_is_loadable_from_the_registry(seed_model, store: Store, experiment_name, tmp_path):
    base = publish(store, experiment_name, seed_model, parent=None, metrics={}, note="seed")
    result = train_sft(sft_cfg(seed_model, tmp_path / "v1", max_steps=5), last_digit_rows(100, 4, TARGET))
    v1 = publish(store, experiment_name, result.checkpoint, parent=base.version, metrics=result.metrics)
    current = store.models(experiment_name).current()
    assert current.version == v1.version == "v1" and current.parent == "v0"
    assert current.metrics["steps"] == 5
    AutoModelForCausalLM.from_pretrained(current.checkpoint)
    AutoTokenizer.from_pretrained(current.checkpoint)


class _Boom(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 3:
            raise RuntimeError("simulated crash mid-training")


def test_failed_training_leaves_no_checkpoint_and_no_registry_entry(seed_model, store, experiment_name, tmp_path):
    out = tmp_path / "crashed"
    with pytest.raises(RuntimeError, match="simulated crash"):
        train_sft(sft_cfg(seed_model, out), last_digit_rows(200, 5, TARGET), callbacks=[_Boom()])
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".crashed.tmp")]
    assert store.models(experiment_name).list() == []


def test_bad_checkpoints_name_the_path_and_the_reason(seed_model, tmp_path):
    import shutil

    with pytest.raises(CheckpointError, match=f"checkpoint {tmp_path / 'missing'} does not exist"):
        train_sft(sft_cfg(str(tmp_path / "missing"), tmp_path / "o"), last_digit_rows(10, 0, TARGET))
    corrupt = tmp_path / "corrupt"
    shutil.copytree(seed_model, corrupt)
    (corrupt / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="config.json is not valid JSON"):
        validate_checkpoint(corrupt)
    truncated = tmp_path / "truncated"
    shutil.copytree(seed_model, truncated)
    weights = truncated / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=f"{weights} are corrupt"):
        validate_checkpoint(truncated)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="has no config.json"):
        validate_checkpoint(tmp_path / "empty")


def test_dataset_in_the_wrong_format_names_the_columns(seed_model, tmp_path):
    with pytest.raises(ValueError, match=r"missing column\(s\) \['completion'\]"):
        train_sft(sft_cfg(seed_model, tmp_path / "o"), [{"prompt": "a", "answer": "b"}])
    with pytest.raises(ValueError, match="missing column"):
        train_dpo(DPOJobConfig(model_path=seed_model, output_dir=str(tmp_path / "d")), [{"prompt": "a"}])


def test_sft_runs_as_a_ray_task(ray_local, seed_model, tmp_path):
    import ray

    ref = train_sft_remote(sft_cfg(seed_model, tmp_path / "ray", max_steps=5), last_digit_rows(50, 6, TARGET))
    result = ray.get(ref)
    assert result.metrics["steps"] == 5
    validate_checkpoint(result.checkpoint)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_a_training_task_hands_its_weights_back_through_the_object_store(ray_local, seed_model, tmp_path, lora):
    """weights=True: the task's second return is the state dict the checkpoint holds (LoRA
    merged), tensor for tensor; the checkpoint is still written as before."""
    import ray
    import torch
    from safetensors.torch import load_file

    result_ref, weights_ref = train_sft_remote(sft_cfg(seed_model, tmp_path / "w", max_steps=2, lora=lora, lora_r=4),
                                               last_digit_rows(16, 6, TARGET), weights=True)
    result, weights = ray.get([result_ref, weights_ref])
    validate_checkpoint(result.checkpoint)
    saved = {}
    for f in sorted(Path(result.checkpoint).glob("*.safetensors")):
        saved |= load_file(str(f))
    assert result.weights is None and sorted(weights) == sorted(saved)  # no second copy rides with the result
    assert all(torch.equal(weights[k], saved[k]) for k in saved)
    q = "model.layers.0.self_attn.q_proj.weight"  # LoRA's all-linear trains it, full fine-tuning too
    assert not torch.equal(weights[q], load_file(f"{seed_model}/model.safetensors")[q])  # trained, not the seed


def _dpo_rows(n: int, seed: int) -> list[dict[str, str]]:
    chosen, rejected = last_digit_rows(n, seed, TARGET), last_digit_rows(n, seed, SEED_MAPPING)
    return [{"prompt": c["prompt"], "chosen": c["completion"], "rejected": r["completion"]}
            for c, r in zip(chosen, rejected, strict=True) if c["completion"] != r["completion"]]


class KillAtStep(TrainerCallback):
    """Stops the process's training at a step, as a SIGKILL there would (nothing after it runs)."""

    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise KeyboardInterrupt(f"killed at step {state.global_step}")


class FirstStep(TrainerCallback):
    def __init__(self):
        self.first = None

    def on_step_begin(self, args, state, control, **kwargs):
        if self.first is None:
            self.first = state.global_step


def test_a_training_task_killed_at_its_first_checkpoint_resumes_from_it_on_ray(ray_local, failpoints, seed_model,
                                                                             tmp_path):
    """The fault drills' training loss (common/failpoints.py): the Ray task stops just after its
    first checkpoint, is SIGKILLed there as a lost node would kill it, and Ray's retry resumes
    from that checkpoint (resumed_from_step), not from step 0."""
    import os
    import signal

    import ray

    from training.sft import train_sft_remote

    cfg = sft_cfg(seed_model, tmp_path / "it1", max_steps=6, save_steps=2, per_device_train_batch_size=8)
    failpoints.arm("training_checkpoint")
    ref = train_sft_remote(cfg, last_digit_rows(32, 1, TARGET), num_cpus=1)
    hit = failpoints.wait_hit("training_checkpoint", lambda: not ray.wait([ref], timeout=0)[0])
    assert hit is not None and hit["step"] == 2, hit
    os.kill(hit["pid"], signal.SIGKILL)
    result = ray.get(ref)
    assert result.metrics["resumed_from_step"] == 2 and result.metrics["steps"] == 6
    validate_checkpoint(result.checkpoint)


@pytest.mark.parametrize("method", ["sft", "dpo"])
def test_a_killed_training_resumes_from_its_last_checkpoint_on_the_same_rows(seed_model, tmp_path, method):
    out = tmp_path / method / "it1"
    if method == "sft":
        cfg = sft_cfg(seed_model, out, max_steps=12, save_steps=5, per_device_train_batch_size=8)
        rows, other_rows, train = last_digit_rows(64, 1, TARGET), last_digit_rows(16, 9, TARGET), train_sft
    else:
        cfg = DPOJobConfig(model_path=seed_model, output_dir=str(out), max_steps=12, save_steps=5,
                           per_device_train_batch_size=8, learning_rate=1e-3, disable_tqdm=True, seed=0)
        rows, other_rows, train = _dpo_rows(64, 1), _dpo_rows(16, 9), train_dpo
    with pytest.raises(KeyboardInterrupt):
        train(cfg, rows, callbacks=[KillAtStep(8)])
    assert not out.exists()  # nothing published-looking was left
    first = FirstStep()
    # rows built anew differ (e.g. the archive grew): the saved rows are the ones trained on
    result = train(cfg, other_rows, callbacks=[first])
    assert first.first == 5 and result.metrics["resumed_from_step"] == 5  # not from step 0
    assert result.metrics["steps"] == 12 and result.metrics["examples"] == len(rows) != len(other_rows)
    validate_checkpoint(result.checkpoint)
    assert not any(p.name.startswith(".it1.") for p in out.parent.iterdir())  # the work dir is gone
