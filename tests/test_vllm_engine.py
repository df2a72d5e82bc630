"""The vLLM engine: what it sends to vLLM, checked against a stand-in of vLLM's API and
validation rules (tests/fake_vllm, for machines without a GPU), and the same on a real GPU
(the gpu-marked tests at the end; `make gpu-check` runs them)."""

from __future__ import annotations

import inspect
import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from common.sampling import ContextLengthError, SamplingParams
from search.engines import make_engine
from search.engines.regex_dialect import check_vllm_regex, unsupported_construct
from search.engines.vllm_engine import VLLMEngine, actor_gpu_share, request_seed

FAKE_VLLM = Path(__file__).parent / "fake_vllm"


@pytest.fixture
def vllm(monkeypatch):
    """The stand-in `vllm` package, imported fresh, with an empty fake GPU."""
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if k == "vllm" or k.startswith("vllm.")}
    monkeypatch.syspath_prepend(str(FAKE_VLLM))
    import vllm as fake

    assert Path(fake.__file__).is_relative_to(FAKE_VLLM)
    fake.reset_device()
    yield fake
    for k in [k for k in sys.modules if k == "vllm" or k.startswith("vllm.")]:
        del sys.modules[k]
    sys.modules.update(saved)


def checkpoint(root: Path, tag: str, *, layers: int = 2, finish_reason: str = "stop", eos=(2, 7, 9),
               weights: bool = True) -> str:
    """A checkpoint directory the stand-in loads: config, generation config, 'weights'."""
    path = root / tag
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "num_hidden_layers": layers, "max_position_embeddings": 64,
        "eos_token_id": 2, "_name_or_path": str(path),
    }))
    (path / "generation_config.json").write_text(json.dumps({"eos_token_id": list(eos)}))
    if weights:
        (path / "fake_weights.json").write_text(json.dumps({"tag": tag, "finish_reason": finish_reason}))
    return str(path)


@pytest.fixture
def engine(vllm, tmp_path):
    return VLLMEngine(checkpoint(tmp_path, "v0"), version="v0", gpu_memory_utilization=0.85)


# --- requests -------------------------------------------------------------------------

@pytest.mark.parametrize("temperature", [0.0, 1e-6])
def test_greedy_with_n_above_1_samples_once_and_copies(engine, temperature):
    """vLLM rejects n > 1 below temperature 1e-5 ('n must be 1 when using greedy sampling')."""
    rows = engine.generate(["map 1 =>", "map 2 =>"], SamplingParams(n=3, temperature=temperature, max_tokens=8))
    assert [len(row) for row in rows] == [3, 3]
    assert all(len({c.text for c in row}) == 1 for row in rows)
    assert [params.n for _, params in engine.llm.requests] == [1, 1]


def test_each_prompt_gets_its_own_params_and_seed(engine, vllm):
    """Identical prompts in one call (a parent refined twice) must not get identical samples."""
    params = SamplingParams(n=2, temperature=1.0, max_tokens=12, seed=5)
    rows = engine.generate(["same prompt", "same prompt"], params)
    sent = [p for _, p in engine.llm.requests]
    assert len(sent) == 2 and all(isinstance(p, vllm.SamplingParams) for p in sent)
    assert sent[0].seed != sent[1].seed and sent[0].seed == request_seed(5, 0)
    assert [c.text for c in rows[0]] != [c.text for c in rows[1]]
    assert engine.generate(["same prompt", "same prompt"], params) == rows  # still reproducible
    unseeded = engine.generate(["a", "b"], SamplingParams(n=2, max_tokens=8))
    assert all(p.seed is None for _, p in engine.llm.requests[-2:]) and len(unseeded) == 2


def test_request_seeds_differ_across_prompts_and_call_seeds():
    seeds = {request_seed(s, i) for s in range(20) for i in range(50)}
    assert len(seeds) == 1000 and all(0 <= s < 2**63 for s in seeds)
    assert request_seed(None, 3) is None


def test_temperature_above_2_is_rejected_as_vllm_does(engine):
    with pytest.raises(ValueError, match=r"SamplingParams.temperature=2.5 .*\[0, 2\]"):
        SamplingParams(temperature=2.5)
    rows = engine.generate(["x"], SamplingParams(temperature=2.0, max_tokens=4))  # the limit itself passes vLLM
    assert len(rows[0]) == 1


def test_extra_eos_ids_are_sent_as_stop_tokens(engine):
    """generation_config="vllm" drops generation_config.json's eos ids: send them ourselves."""
    engine.generate(["x"], SamplingParams(max_tokens=4, stop=["\n"]))
    (_, sent), = engine.llm.requests
    assert sent.stop_token_ids == [7, 9] and sent.stop == ["\n"]  # 2 is the tokenizer's own EOS
    assert engine.llm.init_args["generation_config"] == "vllm"


def test_prefix_caching_is_on_by_default_and_can_be_switched_off(engine, vllm, tmp_path):
    """A task's prompts share its grids: vLLM's automatic prefix caching must be on."""
    assert engine.llm.init_args["enable_prefix_caching"] is True
    engine.close()
    off = VLLMEngine(checkpoint(tmp_path, "v1"), gpu_memory_utilization=0.5, llm_kwargs={"enable_prefix_caching": False})
    assert off.llm.init_args["enable_prefix_caching"] is False


@pytest.mark.parametrize("reason", ["abort", "error", None])
def test_finish_reasons_other_than_stop_and_length_raise(vllm, tmp_path, reason):
    eng = VLLMEngine(checkpoint(tmp_path, "v0", finish_reason=reason), gpu_memory_utilization=0.5)
    with pytest.raises(RuntimeError, match=f"finish_reason={reason!r}"):
        eng.generate(["x"], SamplingParams(max_tokens=4))


def test_length_and_stop_finish_reasons_pass_through(vllm, tmp_path):
    eng = VLLMEngine(checkpoint(tmp_path, "v0", finish_reason="length"), gpu_memory_utilization=0.5)
    assert eng.generate(["x"], SamplingParams(max_tokens=4))[0][0].finish_reason == "length"


def test_chat_prompts_go_as_token_ids_without_added_specials(engine):
    engine.generate([[{"role": "user", "content": "hi"}]], SamplingParams(max_tokens=4))
    (prompt, _), = engine.llm.requests
    assert isinstance(prompt, dict) and prompt["prompt_token_ids"][0] != 1  # no BOS added twice


def test_regex_goes_as_structured_outputs(engine, vllm):
    engine.generate(["x"], SamplingParams(max_tokens=4, regex="( [0-4]){2,3}"))
    (_, sent), = engine.llm.requests
    assert isinstance(sent.structured_outputs, vllm.StructuredOutputsParams)
    assert sent.structured_outputs.regex == "( [0-4]){2,3}"


def test_logprobs_map_vllms_ranked_candidates_to_openai_entries(engine, vllm):
    """vLLM returns, per token, the k most likely plus the sampled token with their ranks."""
    row = engine.generate(["a"], SamplingParams(n=2, temperature=1.0, max_tokens=8, seed=1, logprobs=2))[0]
    assert engine.llm.requests[-1][1].logprobs == 2
    for c in row:
        assert len(c.logprobs) == len(engine.tokenizer(c.text, add_special_tokens=False)["input_ids"])
        assert "".join(e["token"] for e in c.logprobs) == c.text
        for e in c.logprobs:
            assert e["logprob"] == -9.0 and [t["logprob"] for t in e["top_logprobs"]] == [-0.5, -1.0]
    greedy = engine.generate(["a"], SamplingParams(n=2, temperature=0, max_tokens=8, logprobs=0))[0]
    assert greedy[1].logprobs == greedy[0].logprobs and greedy[0].logprobs[0]["top_logprobs"] == []
    assert engine.generate(["a"], SamplingParams(max_tokens=8))[0][0].logprobs is None


def test_regex_outside_vllms_dialect_fails_before_sending(engine):
    params = SamplingParams(max_tokens=4, regex=r"(?=a)a+")  # Python's regex module accepts it
    with pytest.raises(ValueError, match=r"SamplingParams.regex=.*lookahead or lookbehind"):
        engine.generate(["x"], params)
    assert engine.llm.requests == []


# --- loading -------------------------------------------------------------------------

SWAP_SEQUENCE = ["sleep", "wake_up:weights", "collective_rpc:reload_weights",
                 "wake_up:kv_cache", "reset_prefix_cache"]


def _calls(llm) -> list[str]:
    out = []
    for call in llm.calls:
        if call[0] == "wake_up":
            out.append("wake_up:" + ",".join(call[1]))
        elif call[0] == "collective_rpc":
            out.append("collective_rpc:" + call[1])
        else:
            out.append(call[0])
    return out


def test_version_switch_swaps_weights_in_one_engine(engine, vllm, tmp_path):
    llm = engine.llm
    engine.load(checkpoint(tmp_path, "v1"), version="v1")
    assert engine.llm is llm and engine.last_load_kind == "swap"
    assert _calls(llm) == SWAP_SEQUENCE and llm.calls[0] == ("sleep", 2)
    row = engine.generate(["x"], SamplingParams(max_tokens=12, temperature=0))[0]
    assert row[0].model_version == "v1" and row[0].text.startswith(" v1-")
    assert vllm.DEVICE["used"] == pytest.approx(0.85) and len(vllm.DEVICE["engines"]) == 1


@pytest.mark.parametrize("swap_weights", [True, False])
def test_reload_at_085_frees_the_old_engine_first(vllm, tmp_path, swap_weights):
    """A restart (another architecture, or swap_weights=False) must shut the old engine down:
    at 0.85 of the device two engines cannot coexist, and dropping the object frees nothing."""
    eng = VLLMEngine(checkpoint(tmp_path, "v0"), gpu_memory_utilization=0.85, swap_weights=swap_weights)
    old = eng.llm
    eng.load(checkpoint(tmp_path, "v1", layers=4 if swap_weights else 2), version="v1")
    assert eng.llm is not old and eng.last_load_kind == "restart"
    assert vllm.DEVICE["engines"] == [eng.llm] and vllm.DEVICE["used"] == pytest.approx(0.85)
    assert eng.generate(["x"], SamplingParams(max_tokens=12, temperature=0))[0][0].text.startswith(" v1-")


def test_failed_swap_leaves_the_previous_version_serving(engine, tmp_path):
    llm = engine.llm
    with pytest.raises(RuntimeError, match=r"in place failed: FileNotFoundError\('no weights.*still serves .*v0"):
        engine.load(checkpoint(tmp_path, "broken", weights=False), version="v1")
    assert engine.version == "v0" and engine.llm is llm and engine.checkpoint.endswith("v0")
    row = engine.generate(["x"], SamplingParams(max_tokens=12, temperature=0))[0]
    assert row[0].model_version == "v0" and row[0].text.startswith(" v0-")
    engine.load(checkpoint(tmp_path, "v2"), version="v2")  # and the next load still works
    assert engine.generate(["x"], SamplingParams(max_tokens=12))[0][0].text.startswith(" v2-")


def test_swap_on_a_vllm_without_in_place_reload_falls_back_to_a_fresh_engine(engine, vllm, tmp_path, monkeypatch):
    """If the workers cannot reload (another vLLM's API), the previous version still serves,
    from a fresh engine, and the error says how to switch in-place reload off."""
    old = engine.llm

    def no_such_method(method, *args, **kwargs):
        raise AttributeError(f"worker has no method {method!r}")

    monkeypatch.setattr(old, "collective_rpc", no_such_method)
    with pytest.raises(RuntimeError, match="swap_weights=False"):
        engine.load(checkpoint(tmp_path, "v1"), version="v1")
    assert engine.llm is not old and vllm.DEVICE["engines"] == [engine.llm]
    assert engine.version == "v0" and engine.generate(["x"], SamplingParams(max_tokens=12))[0][0].text.startswith(" v0-")


def test_failed_restart_with_a_failed_restore_stops_the_engine(engine, vllm, tmp_path):
    previous = Path(engine.checkpoint)
    (previous / "fake_weights.json").unlink()  # the previous checkpoint is gone from disk too
    with pytest.raises(FileNotFoundError):
        engine.load(checkpoint(tmp_path, "other", layers=8, weights=False), version="v1")
    assert engine.llm is None and engine.version is None and vllm.DEVICE["engines"] == []


def test_failed_restart_restores_the_previous_version(engine, vllm, tmp_path):
    with pytest.raises(FileNotFoundError, match="no weights"):
        engine.load(checkpoint(tmp_path, "other", layers=8, weights=False), version="v1")
    assert engine.version == "v0" and engine.context_length == 64
    assert engine.generate(["x"], SamplingParams(max_tokens=12))[0][0].text.startswith(" v0-")
    assert len(vllm.DEVICE["engines"]) == 1


def test_load_of_a_directory_without_config_touches_nothing(engine, tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json.*still serving 'v0'"):
        engine.load(str(tmp_path / "missing"))
    assert engine.llm.calls == [] and engine.version == "v0"


def test_close_gives_the_memory_back(engine, vllm):
    engine.close()
    assert vllm.DEVICE["used"] == pytest.approx(0.0) and engine.llm is None
    with pytest.raises(RuntimeError, match="no checkpoint loaded"):
        engine.generate(["x"], SamplingParams())


# --- platforms without sleep mode (vLLM's CPU platform) ---------------------------

@pytest.fixture
def cpu_engine(vllm, tmp_path, monkeypatch):
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    vllm.reset_device("cpu")
    return VLLMEngine(checkpoint(tmp_path, "v0"), version="v0")


def test_default_engine_starts_where_the_platform_has_no_sleep_mode(cpu_engine):
    """Regression: the defaults (swap_weights=True) asked vLLM's CPU platform for sleep mode,
    which it refuses at start-up ("Sleep mode is not supported on current platform")."""
    args = cpu_engine.llm.init_args
    assert args["enable_sleep_mode"] is False and cpu_engine.sleep_mode is False
    assert args["kv_cache_memory_bytes"] == 2**30  # sized in bytes: no RAM-fraction check, no warm-up pass
    assert args["enable_chunked_prefill"] is False  # the seeded chunked-prefill crash of vllm-cpu 0.32.0
    assert cpu_engine.generate(["x"], SamplingParams(max_tokens=12, temperature=0))[0][0].text.startswith(" v0-")


def test_cpu_kv_cache_follows_the_argument_then_the_environment(vllm, tmp_path, monkeypatch):
    vllm.reset_device("cpu")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "3")
    assert VLLMEngine(checkpoint(tmp_path, "a")).llm.init_args["kv_cache_memory_bytes"] == 3 * 2**30
    assert VLLMEngine(checkpoint(tmp_path, "b"), cpu_kv_cache_gib=0.5).llm.init_args["kv_cache_memory_bytes"] == 2**29
    kept = VLLMEngine(checkpoint(tmp_path, "c"), llm_kwargs={"enable_chunked_prefill": True})
    assert kept.llm.init_args["enable_chunked_prefill"] is True  # the user's llm_kwargs win
    with pytest.raises(ValueError, match="cpu_kv_cache_gib=0"):
        VLLMEngine(checkpoint(tmp_path, "d"), cpu_kv_cache_gib=0)


def test_cpu_reserved_cores_reach_the_engine_process_only_while_it_starts(vllm, tmp_path, monkeypatch):
    """vLLM's engine core reads $VLLM_CPU_NUM_OF_RESERVED_CPU when it spawns; this process keeps its own."""
    vllm.reset_device("cpu")
    monkeypatch.setenv("VLLM_CPU_NUM_OF_RESERVED_CPU", "3")
    assert VLLMEngine(checkpoint(tmp_path, "a"), cpu_reserved_cores=0).llm.start_env == {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    assert os.environ["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "3"  # restored
    assert VLLMEngine(checkpoint(tmp_path, "b")).llm.start_env == {"VLLM_CPU_NUM_OF_RESERVED_CPU": "3"}  # vLLM's rule
    monkeypatch.delenv("VLLM_CPU_NUM_OF_RESERVED_CPU")
    VLLMEngine(checkpoint(tmp_path, "c"), cpu_reserved_cores=1)
    assert "VLLM_CPU_NUM_OF_RESERVED_CPU" not in os.environ  # unset again, as it was
    ckpt = checkpoint(tmp_path, "d")
    for bad in (-1, 0.5, True):
        with pytest.raises(ValueError, match="cpu_reserved_cores"):
            VLLMEngine(ckpt, cpu_reserved_cores=bad)


def test_top_p_candidates_reach_the_cpu_engine_process_only(vllm, tmp_path, monkeypatch):
    """The sort-free top-p (search/engines/top_p.py) is installed by the engine process that samples,
    which reads the number from its environment when vLLM imports ratchet's worker module there."""
    monkeypatch.delenv("RATCHET_VLLM_TOP_P_CANDIDATES", raising=False)
    assert VLLMEngine(checkpoint(tmp_path, "g"), top_p_candidates=256).llm.top_p_env is None  # a GPU samples on its own
    vllm.reset_device("cpu")
    assert VLLMEngine(checkpoint(tmp_path, "a"), top_p_candidates=256).llm.top_p_env == "256"
    assert "RATCHET_VLLM_TOP_P_CANDIDATES" not in os.environ  # only while it starts
    assert VLLMEngine(checkpoint(tmp_path, "b")).llm.top_p_env is None  # vLLM's sort
    ckpt = checkpoint(tmp_path, "c")
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="top_p_candidates"):
            VLLMEngine(ckpt, top_p_candidates=bad)


def test_gpu_engine_ignores_cpu_reserved_cores(vllm, tmp_path, monkeypatch):
    monkeypatch.delenv("VLLM_CPU_NUM_OF_RESERVED_CPU", raising=False)
    assert VLLMEngine(checkpoint(tmp_path, "a"), cpu_reserved_cores=0).llm.start_env == {"VLLM_CPU_NUM_OF_RESERVED_CPU": None}


def test_gpu_engine_gets_no_cpu_arguments(engine):
    assert "kv_cache_memory_bytes" not in engine.llm.init_args and engine.sleep_mode is True


def test_cpu_version_switch_reloads_in_place_without_sleeping(cpu_engine, tmp_path):
    llm = cpu_engine.llm
    cpu_engine.load(checkpoint(tmp_path, "v1"), version="v1")
    assert cpu_engine.llm is llm and cpu_engine.last_load_kind == "swap"
    assert _calls(llm) == ["collective_rpc:reload_weights", "reset_prefix_cache"]
    assert llm.calls[0][3] == {"weights_path": cpu_engine.checkpoint}  # the path itself: no update_config
    assert cpu_engine.generate(["x"], SamplingParams(max_tokens=12, temperature=0))[0][0].text.startswith(" v1-")


def test_cpu_failed_switch_rolls_back_in_place(cpu_engine, tmp_path):
    llm = cpu_engine.llm
    with pytest.raises(RuntimeError, match=r"in place failed: FileNotFoundError\('no weights.*still serves .*v0"):
        cpu_engine.load(checkpoint(tmp_path, "broken", weights=False), version="v1")
    assert cpu_engine.llm is llm and cpu_engine.version == "v0"
    assert cpu_engine.generate(["x"], SamplingParams(max_tokens=12, temperature=0))[0][0].text.startswith(" v0-")


def _tag_weights(tag: str) -> dict:
    import torch

    return {"tag": torch.tensor(list(tag.encode()), dtype=torch.uint8), "w": torch.zeros(3)}


@pytest.mark.parametrize("platform", ["cpu", "cuda"])
def test_in_memory_weights_reach_the_workers_without_a_checkpoint(vllm, tmp_path, platform):
    vllm.reset_device(platform)
    eng = VLLMEngine(checkpoint(tmp_path, "v0"), version="v0", gpu_memory_utilization=0.5)
    llm = eng.llm
    eng.load_weights(_tag_weights("mem1"), version="v1", checkpoint=str(tmp_path / "v1-on-disk"))
    assert eng.llm is llm and eng.version == "v1" and eng.last_load_kind == "memory"
    assert eng.checkpoint == str(tmp_path / "v1-on-disk")
    (_, method, (path,), _), = [c for c in llm.calls if c[0] == "collective_rpc"]
    assert method == "ratchet_load_file" and path.startswith("/dev/shm/")  # RAM, not disk: tensors cannot cross vLLM's RPC
    assert not Path(path).exists()  # removed once the workers have the weights
    row = eng.generate(["x"], SamplingParams(max_tokens=12, temperature=0))[0]
    assert row[0].text.startswith(" mem1-") and row[0].model_version == "v1"


def test_bad_in_memory_weights_roll_back_to_the_checkpoint(cpu_engine):
    import torch

    with pytest.raises(RuntimeError, match=r"in-memory weights of v1 in place failed: KeyError.*still serves"):
        cpu_engine.load_weights({"w": torch.zeros(2)}, version="v1")
    assert cpu_engine.version == "v0"
    assert cpu_engine.generate(["x"], SamplingParams(max_tokens=12, temperature=0))[0][0].text.startswith(" v0-")
    with pytest.raises(RuntimeError, match="before load_weights"):
        VLLMEngine().load_weights({}, version="v1")


# --- GPU memory share --------------------------------------------------------------

def test_memory_utilization_is_derived_from_the_actors_gpu_share(vllm, tmp_path):
    ckpt = checkpoint(tmp_path, "v0")
    assert VLLMEngine(ckpt, gpu_share=0.5).llm.init_args["gpu_memory_utilization"] == pytest.approx(0.425)
    vllm.reset_device()
    assert VLLMEngine(ckpt, gpu_share=0.25, memory_fraction=0.8).llm.init_args["gpu_memory_utilization"] == pytest.approx(0.2)
    vllm.reset_device()
    assert VLLMEngine(ckpt, gpu_memory_utilization=0.3).llm.init_args["gpu_memory_utilization"] == 0.3
    with pytest.raises(ValueError, match="gpu_share=1.5"):
        VLLMEngine(ckpt, gpu_share=1.5)
    assert actor_gpu_share() == 1.0  # outside a Ray actor: the whole device


_RAY_SHARE = """
import json, sys
import ray
from search.engines.vllm_engine import VLLMEngine

ray.init(num_cpus=1, num_gpus=1, include_dashboard=False, log_to_driver=False,
         runtime_env={"env_vars": {"PYTHONPATH": sys.argv[2]}})

@ray.remote(num_gpus=0.5, num_cpus=0)
def utilisation(path):
    return VLLMEngine(path).llm.init_args["gpu_memory_utilization"]

print(json.dumps(ray.get([utilisation.remote(sys.argv[1]) for _ in range(2)])))
ray.shutdown()
"""


@pytest.mark.slow  # starts its own Ray: about 30 s
def test_a_ray_actor_with_half_a_gpu_asks_vllm_for_half_the_memory(vllm, tmp_path):
    """In a real Ray worker given num_gpus=0.5 (one logical GPU, own Ray instance in a subprocess
    so the session's Ray is untouched), the engine derives 0.85 x 0.5 of the device."""
    import os
    import subprocess

    root = Path(__file__).parent.parent
    path = os.pathsep.join([str(FAKE_VLLM), str(root), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", _RAY_SHARE, checkpoint(tmp_path, "v0"), path], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": path, "RAY_ADDRESS": ""}, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [0.425, 0.425]


def test_two_half_gpu_actors_fit_one_device(vllm, tmp_path):
    """Two actors with num_gpus=0.5 each: with the derived utilisation both pass start-up."""
    a = VLLMEngine(checkpoint(tmp_path, "a"), gpu_share=0.5)
    b = VLLMEngine(checkpoint(tmp_path, "b"), gpu_share=0.5)
    assert len(vllm.DEVICE["engines"]) == 2 and a.llm is not b.llm
    with pytest.raises(ValueError, match="less than desired GPU memory utilization"):
        VLLMEngine(checkpoint(tmp_path, "c"), gpu_memory_utilization=0.85)  # the old whole-device default


def test_without_vllm_the_error_says_how_to_install():
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match=r"make setup-gpu.*make setup-vllm"):
            make_engine("vllm", checkpoint="/any")
    else:
        pytest.skip("vllm is installed: the gpu tests cover it")


# --- the regex dialect of vLLM's structured outputs ----------------------------------

UNSUPPORTED = [r"(?=a)a", r"(?!b)a", r"(?<=a)b", r"(?<!a)b", r"(a)\1", r"(?P<x>a)(?P=x)", r"(?P<n>a)",
               r"(?>a+)", r"a++", r"a*+", r"(?i)abc", r"\p{L}+", r"a{,3}", r"\bfoo\b", r"\Aabc\Z"]
SUPPORTED = ["( [0-4]){2,3}", "a+", r"\d+", r"\w+\s", "^abc$", "[[:alpha:]]", "a|", "(?:a)?", r"[^\n]+", ".*",
             r"[(?=]+", r"[\b]", r"\(\?=", "a+?", "[a-z]{2,}"]


@pytest.mark.parametrize("pattern", UNSUPPORTED)
def test_scan_finds_constructs_vllms_backends_reject(pattern):
    assert unsupported_construct(pattern) is not None
    with pytest.raises(ValueError, match="SamplingParams.regex="):
        check_vllm_regex(pattern)


@pytest.mark.parametrize("pattern", SUPPORTED)
def test_scan_passes_plain_patterns(pattern):
    assert unsupported_construct(pattern) is None
    check_vllm_regex(pattern)


def _demo_patterns() -> list[str]:
    """The patterns the SOAR demo samples under: the DSL body grammar for each task's colours."""
    import yaml

    from evolution.programs import body_regex, colours
    from evolution.tasks import load_split, select

    demo = yaml.safe_load((Path(__file__).parent.parent / "configs" / "soar-demo.yaml").read_text())["tasks"]
    tasks = select(load_split(demo["split"]), ids=list(demo["ids"]) + list(demo["heldout_ids"]))
    shown = [[ex.input for ex in t.train + t.test] + [ex.output for ex in t.train] for t in tasks.values()]
    return sorted({body_regex()} | {body_regex(colours=colours(grids)) for grids in shown})


def test_the_demos_patterns_are_in_vllms_dialect():
    patterns = _demo_patterns()
    assert len(patterns) > 5
    for p in patterns:
        assert unsupported_construct(p) is None, p
        check_vllm_regex(p)  # with xgrammar's parser where xgrammar is installed


def test_scan_agrees_with_xgrammar():
    """The scan is the CPU fallback of xgrammar's own parser: they must agree (xgrammar reads
    \\A and \\Z as letters with a warning, which the scan rejects on purpose)."""
    xgr = pytest.importorskip("xgrammar")

    def accepts(p: str) -> bool:
        try:
            xgr.Grammar.from_regex(p)
        except Exception:
            return False
        return True

    assert [p for p in UNSUPPORTED if accepts(p)] == [r"\Aabc\Z"]
    assert [p for p in SUPPORTED + _demo_patterns() if not accepts(p)] == []


# --- on a real GPU (make gpu-check) -------------------------------------------------

@pytest.fixture(scope="module")
def gpu_models(tmp_path_factory):
    torch = pytest.importorskip("torch")
    pytest.importorskip("vllm")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from _models import build_models

    return build_models(tmp_path_factory)


@pytest.mark.gpu
def test_vllm_on_gpu_greedy_seeds_regex(gpu_models):
    from _models import expected

    prompts = ["map 3 1 4 =>", "map 1 2 3 4 5 6 =>", "map 8 =>", "map 0 9 =>"]
    engine = make_engine("vllm", checkpoint=gpu_models["trained"], version="v0", gpu_memory_utilization=0.3)
    try:
        rows = engine.generate(prompts, SamplingParams(temperature=0, max_tokens=8, n=2))
        assert [row[0].text for row in rows] == [expected(p) for p in prompts]
        assert all(len(row) == 2 and row[0].model_version == "v0" for row in rows)
        seeded = SamplingParams(n=3, temperature=1.0, max_tokens=8, seed=1)
        same = engine.generate(["map 1 2 =>"] * 2, seeded)
        assert same == engine.generate(["map 1 2 =>"] * 2, seeded)
        import regex

        pattern = "( [0-4]){2,3}"
        constrained = engine.generate(prompts, SamplingParams(n=8, temperature=1.0, max_tokens=12, seed=0, regex=pattern))
        assert all(regex.fullmatch(pattern, c.text) for row in constrained for c in row)
        chat = engine.generate([[{"role": "user", "content": "map 1 =>"}]], SamplingParams(n=2, max_tokens=4))
        assert len(chat[0]) == 2
        with pytest.raises(ContextLengthError):
            engine.generate(["map " * 1000], SamplingParams(max_tokens=8))
        # random weights sample diverse text: identical prompts in one call must not get the same samples
        engine.load(gpu_models["untrained"], version="v1")
        loose = engine.generate(["map 1 2 =>"] * 2, SamplingParams(n=8, temperature=2.0, max_tokens=8, seed=1))
        assert [c.text for c in loose[0]] != [c.text for c in loose[1]]
    finally:
        engine.close()


@pytest.mark.gpu
def test_vllm_on_gpu_reload_at_085_and_switch_time(gpu_models, tmp_path):
    """A version switch in place (sleep mode) and a restart, both at 0.85 of the device."""
    from _models import GREEDY

    engine = make_engine("vllm", checkpoint=gpu_models["trained"], version="v0", gpu_memory_utilization=0.85)
    try:
        start_s = engine.last_load_s
        engine.load(gpu_models["untrained"], version="v1")
        assert engine.last_load_kind == "swap"
        assert engine.generate(["map 1 =>"], GREEDY)[0][0].model_version == "v1"
        swap_s = engine.last_load_s
        engine.load(gpu_models["trained"], version="v2")  # back: the trained answers again
        assert engine.generate(["map 3 1 4 =>"], GREEDY)[0][0].text == " 9"
        broken = tmp_path / "broken"
        shutil.copytree(gpu_models["trained"], broken)
        for f in broken.glob("*.safetensors"):
            f.write_bytes(b"not weights")
        with pytest.raises(Exception):  # noqa: B017 - whatever vLLM's loader raises for corrupt safetensors
            engine.load(str(broken), version="v3")
        assert engine.version == "v2" and engine.generate(["map 3 1 4 =>"], GREEDY)[0][0].text == " 9"
    finally:
        engine.close()
    restarting = make_engine("vllm", checkpoint=gpu_models["trained"], gpu_memory_utilization=0.85, swap_weights=False)
    try:
        started = time.perf_counter()
        restarting.load(gpu_models["untrained"], version="v1")
        restart_s = time.perf_counter() - started
        assert restarting.last_load_kind == "restart" and restarting.version == "v1"
    finally:
        restarting.close()
    print(f"\nvllm load times: start {start_s:.1f} s, in-place swap {swap_s:.2f} s, restart {restart_s:.1f} s")


@pytest.mark.gpu
def test_transformers_bf16_and_vllm_agree_on_gpu(gpu_models):
    from _models import GREEDY, expected

    prompts = ["map 3 1 4 =>", "map 8 =>", "map 0 9 =>"]
    hf = make_engine("transformers", checkpoint=gpu_models["trained"], device="cuda")
    assert str(hf.dtype) == "torch.bfloat16"
    hf_rows = hf.generate(prompts, SamplingParams(temperature=0, max_tokens=8, n=2))
    assert [row[0].text for row in hf_rows] == [expected(p) for p in prompts]
    assert len(hf.generate(prompts, SamplingParams(n=16, temperature=1.0, max_tokens=8, seed=0))[0]) == 16
    del hf
    engine = make_engine("vllm", checkpoint=gpu_models["trained"], gpu_memory_utilization=0.3)
    try:
        assert [r[0].text for r in engine.generate(prompts, GREEDY)] == [row[0].text for row in hf_rows]
    finally:
        engine.close()


@pytest.mark.parametrize("name", ["scaling", "tpo", "soar"])
def test_vllm_configs_differ_from_their_transformers_twins_only_in_the_sampler(name):
    """configs/<name>-smollm-vllm.yaml is the same experiment on vLLM: it must not drift."""
    import yaml

    root = Path(__file__).parent.parent / "configs"
    plain = yaml.safe_load((root / f"{name}-smollm.yaml").read_text())
    vllm_cfg = yaml.safe_load((root / f"{name}-smollm-vllm.yaml").read_text())
    assert vllm_cfg.pop("experiment") == plain.pop("experiment") + "-vllm"
    sampler, plain_sampler = vllm_cfg.pop("sampler"), plain.pop("sampler")
    assert vllm_cfg == plain and sampler.pop("engine") == "vllm"
    assert set(sampler.pop("engine_kwargs")) <= set(inspect.signature(VLLMEngine).parameters)
    sampler.pop("max_inflight_per_actor", None)  # vLLM takes the requests in flight in one call: more may gather
    assert sampler == {k: v for k, v in plain_sampler.items() if k not in ("engine", "engine_kwargs")}


def test_several_requests_go_to_vllm_in_one_call_each_with_its_own_params_and_errors(engine):
    """generate_many: one LLM.generate for all, each request's seeds and n as generate() gives
    them alone; a request too long for the context fails alone."""
    a = (["map 1 =>", "map 2 =>"], SamplingParams(n=2, temperature=1.0, max_tokens=8, seed=3))
    b = (["map 3 =>"], SamplingParams(n=3, temperature=0.0, max_tokens=4))
    too_long = (["x " * 80], SamplingParams(max_tokens=8))
    calls = engine.llm.generate_calls
    together = engine.generate_many([a, too_long, b])
    assert engine.llm.generate_calls == calls + 1
    assert isinstance(together[1], ContextLengthError)
    alone = [engine.generate(*a), engine.generate(*b)]
    assert [[[c.text for c in row] for row in r] for r in (together[0], together[2])] == \
        [[[c.text for c in row] for row in r] for r in alone]
    assert [len(row) for row in together[2]] == [3] and len({c.text for c in together[2][0]}) == 1  # greedy, copied
    assert engine.generate_many([too_long])[0].__class__ is ContextLengthError
    assert engine.llm.generate_calls == calls + 3  # the all-mistakes call did not reach vLLM


def test_the_sampler_actor_hands_vllm_its_requests_through_the_coalescer(vllm, tmp_path):
    from search.sampler_worker import SamplerWorker

    worker = SamplerWorker("vllm", {"gpu_memory_utilization": 0.85}, checkpoint(tmp_path, "v0"), "v0")
    rows = worker.generate(["map 1 =>"], SamplingParams(n=2, temperature=1.0, max_tokens=8, seed=1))
    with pytest.raises(ContextLengthError):
        worker.generate(["x " * 80], SamplingParams(max_tokens=8))
    assert [len(r) for r in rows] == [2] and worker._coalescer.batches == [1, 1]
    assert worker.stats()["requests"] == 1 and worker.stats()["running"] == 0
