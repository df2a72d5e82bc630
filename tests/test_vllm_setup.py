"""What decides between an in-place weight swap and a restart of vLLM (search/engines/vllm_setup.py)."""

from __future__ import annotations

import json
from pathlib import Path

from search.engines.vllm_setup import _fingerprint


def _checkpoint(root: Path, tokenizer_config: dict, **config) -> str:
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 8} | config))
    (root / "tokenizer.json").write_text('{"model": {"type": "BPE"}}')
    (root / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    return str(root)


def test_a_trained_checkpoint_swaps_in_place_whatever_its_loader_options(tmp_path):
    """SOAR on vLLM restarted the engine after every training (21 s instead of 0.2 s) when run
    without $HF_HUB_OFFLINE: save_pretrained wrote `local_files_only: false` into the trained
    checkpoint's tokenizer_config.json where the base had `true`, and the bytes differed."""
    template = {"chat_template": "{{ messages }}", "eos_token": "<|im_end|>"}
    base = _checkpoint(tmp_path / "base", template | {"local_files_only": True}, transformers_version="5.24.0")
    trained = _checkpoint(tmp_path / "it1", template | {"local_files_only": False}, transformers_version="5.19.0",
                          use_cache=False)
    assert _fingerprint(base) == _fingerprint(trained)
    other = _checkpoint(tmp_path / "other", template | {"eos_token": "</s>"})
    assert _fingerprint(other) != _fingerprint(base)  # a different tokenizer still restarts
    wider = _checkpoint(tmp_path / "wider", template | {"local_files_only": True}, hidden_size=16)
    assert _fingerprint(wider) != _fingerprint(base)
