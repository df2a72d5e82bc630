"""Training a pretrained chat checkpoint: LoRA by default, TRL's conversational rows, merged for publishing.

The checkpoint is the tiny GGUF model test_pretrained.py writes, converted by training.pretrained
(a byte-level BPE with a ChatML template, as SmolLM2's): the path a real model takes, in seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_pretrained import write_tiny_gguf
from transformers import AutoModelForCausalLM

from search.engines.hf import TransformersEngine
from training import pretrained
from training.checkpoints import is_chat_model, is_seed_model
from training.common import lora_args
from training.dpo import DPOJobConfig, train_dpo
from training.sft import SFTJobConfig, train_sft

TINY = {"name": "tiny-chat", "package": "tiny-pkg", "version": "0.0.1", "wheel_sha256": "-",
        "licence": "Apache-2.0", "origin": "written by the test"}


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory) -> str:
    import hashlib

    root = tmp_path_factory.mktemp("tiny-chat")
    gguf_path = root / "tiny.gguf"
    write_tiny_gguf(gguf_path)
    manifests = root / "manifests"
    manifests.mkdir()
    entry = TINY | {"file": "tiny.gguf", "file_sha256": hashlib.sha256(gguf_path.read_bytes()).hexdigest()}
    (manifests / "tiny-chat.json").write_text(json.dumps(entry))
    saved = pretrained.MANIFESTS_DIR
    pretrained.MANIFESTS_DIR = manifests
    try:
        return str(pretrained.fetch("tiny-chat", source=gguf_path, home=root / "home"))
    finally:
        pretrained.MANIFESTS_DIR = saved


class Fields:
    lora_r, lora_alpha, lora_targets = 4, 8, "q_proj,v_proj"


def test_lora_is_the_default_for_pretrained_checkpoints_and_full_training_for_seeds(chat_model):
    assert is_chat_model(chat_model) and not is_seed_model(chat_model)
    assert lora_args(None, Fields, chat_model)["lora"] is True
    assert lora_args(None, Fields, "models/tpo-arith-seed")["lora"] is False  # seeds learnt from scratch: full
    assert lora_args(False, Fields, chat_model)["lora"] is False  # an explicit choice wins
    assert not is_chat_model("models/tpo-arith-seed")  # its minimal template only serves `ratchet serve`


def conversational(n: int) -> list[dict]:
    return [{"prompt": [{"role": "user", "content": f"say {i % 3}"}],
             "completion": [{"role": "assistant", "content": f"{i % 3}{i % 3}{i % 3}"}]} for i in range(n)]


def test_lora_sft_on_conversational_rows_publishes_a_merged_chat_checkpoint(chat_model, tmp_path):
    class AllLinear(Fields):
        lora_r, lora_alpha, lora_targets = 8, 16, "all-linear"

    args = lora_args(None, AllLinear, chat_model)
    cfg = SFTJobConfig(model_path=chat_model, output_dir=str(tmp_path / "sft"), max_steps=40,
                       per_device_train_batch_size=8, learning_rate=5e-2, disable_tqdm=True, report_to="none",
                       save_steps=6, logging_steps=2, **args)
    result = train_sft(cfg, conversational(48))
    ckpt = Path(result.checkpoint)
    assert not (ckpt / "adapter_config.json").exists()  # merged: every engine loads it without peft
    model = AutoModelForCausalLM.from_pretrained(ckpt)
    assert not any("lora" in name for name, _ in model.named_parameters())
    m = result.metrics
    assert m["lora_r"] == 8 and m["steps"] == 40 and m["last_loss"] < m["first_loss"]
    assert m["s_per_step"] > 0 and m["peak_memory_mb"] > 0  # time per step and peak memory in the run's log
    assert is_chat_model(ckpt)  # the template travels with the published checkpoint
    engine = TransformersEngine(str(ckpt), prefix_cache_bytes=0)
    from common.sampling import SamplingParams

    out = engine.generate([[{"role": "user", "content": "say 1"}]], SamplingParams(temperature=0, max_tokens=3))
    assert out[0][0].text in {"000", "111", "222"}  # it learnt the assistant turn's form, through the chat template


def test_lora_dpo_on_conversational_pairs_with_a_prefilled_thought_marker(chat_model, tmp_path):
    from thinking.pairs import trl_rows

    prompt = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "T:", "prefill": True}]
    rows = trl_rows([{"prompt": prompt, "chosen": " a R: 1", "rejected": " b R: 2"}] * 8)
    cfg = DPOJobConfig(model_path=chat_model, output_dir=str(tmp_path / "dpo"), max_steps=3,
                       per_device_train_batch_size=4, learning_rate=1e-3, disable_tqdm=True, report_to="none",
                       **lora_args(None, Fields, chat_model))
    result = train_dpo(cfg, rows)
    assert result.metrics["steps"] == 3 and result.metrics["lora_r"] == 4
    assert not (Path(result.checkpoint) / "adapter_config.json").exists()
