"""The vLLM engine on a real CUDA GPU (`make gpu-check`): greedy, seeds, regexes, a version
switch at 0.85 of the memory, and agreement with the transformers engine. Skipped elsewhere."""

from __future__ import annotations

import shutil
import time

import pytest

from common.sampling import ContextLengthError, SamplingParams
from search.engines import make_engine

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
