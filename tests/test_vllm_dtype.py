"""dtype "native": vLLM on a CPU in bfloat16 only where the CPU computes it, float32 elsewhere."""

from __future__ import annotations

from search.engines import vllm_engine
from search.engines.vllm_engine import VLLMEngine
from search.engines.vllm_setup import native_cpu_dtype

AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n"
AVX512_BF16 = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16\n"
AMX = "processor\t: 0\nflags\t\t: fpu avx2 avx512f amx_tile amx_bf16\n"


def test_native_is_bfloat16_only_with_bf16_instructions():
    assert native_cpu_dtype(AVX2) == "float32"
    assert native_cpu_dtype(AVX512_BF16) == "bfloat16"
    assert native_cpu_dtype(AMX) == "bfloat16"
    assert native_cpu_dtype("flags\t\t: avx512f avx512bw\n") == "float32"  # AVX-512 without BF16
    assert native_cpu_dtype("") == "float32"
    assert native_cpu_dtype() in ("float32", "bfloat16")  # this machine's own flags


def test_llm_args_resolve_native_per_platform(monkeypatch):
    engine = VLLMEngine(dtype="native", gpu_share=1.0)
    monkeypatch.setattr(vllm_engine, "native_cpu_dtype", lambda: "bfloat16")
    monkeypatch.setattr(vllm_engine, "platform", lambda: ("cpu", False))
    assert engine.llm_args()["dtype"] == "bfloat16"
    monkeypatch.setattr(vllm_engine, "platform", lambda: ("cuda", True))
    assert engine.llm_args()["dtype"] == "auto"  # a GPU: vLLM's own choice
    assert VLLMEngine(dtype="float16", gpu_share=1.0).llm_args()["dtype"] == "float16"  # an explicit dtype stays
