"""Where a vLLM-CPU decode step's time goes, on SmolLM2-135M-Instruct (issue #43, item 2).

    .venv-vllm/bin/python scripts/vllm_step_profile.py                 # the chat kind of bench_engines
    .venv-vllm/bin/python scripts/vllm_step_profile.py --top-p 1.0     # the same without top-p
    .venv-vllm/bin/python scripts/vllm_step_profile.py --kind soar     # bench_engines' SOAR-like requests

vLLM runs its engine core in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0), bfloat16 where the
CPU computes it, eager, every core computing, so the torch profiler sees every operator of a
step. One untimed call first (kernels' set-up), then one profiled call of the same requests.
It prints the wall time, the operators' own CPU time by group (matmuls, attention, sampling,
the rest) as a share of the wall, what no operator accounts for (Python: the scheduler, input
preparation, output processing), and the top operators.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import defaultdict

# groups by operator name; the first that matches wins
GROUPS = [
    ("matmul (linear layers, lm_head)", ("aten::mm", "aten::addmm", "aten::linear", "aten::matmul", "aten::bmm",
                                        "onednn", "mkldnn", "_C::onednn_mm", "onednn_scaled_mm", "dnnl")),
    ("attention", ("attention", "attn", "paged", "reshape_and_cache", "sdpa", "flash")),
    ("sampling (softmax, sort, top-p, multinomial)", ("sort", "softmax", "multinomial", "exponential", "topk",
                                                       "cumsum", "top_p", "top_k", "log_softmax", "argmax",
                                                       "scatter", "gather", "div_", "masked_fill", "q.exponential")),
    ("norms and activations", ("rms_norm", "silu", "layer_norm", "act_and_mul", "gelu", "rotary")),
    ("copies and indexing", ("copy_", "index", "cat", "to", "empty", "zeros", "fill_", "clone", "contiguous",
                             "slice", "select", "view", "as_strided", "reshape", "expand", "narrow", "pin_memory")),
]


def group_of(name: str) -> str:
    low = name.lower()
    for group, keys in GROUPS:
        if any(k in low for k in keys):
            return group
    return "other operators"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=("chat", "soar"), default="chat")
    parser.add_argument("--top-p", type=float, default=0.95, help="the chat kind's top_p (bench_engines: 0.95)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--max-num-seqs", type=int, default=None, help="vLLM's max_num_seqs (None: its default)")
    parser.add_argument("--top", type=int, default=15, help="operators listed")
    args = parser.parse_args()
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine core in this process: one profile sees it
    os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    import torch
    from torch.profiler import ProfilerActivity, profile

    from benchmarks.bench_engines import MODEL, chat_prompts, soar_prompts
    from common.sampling import SamplingParams
    from search.engines import make_engine
    from training.pretrained import resolve_checkpoint

    extra = {} if args.max_num_seqs is None else {"llm_kwargs": {"max_num_seqs": args.max_num_seqs}}
    engine = make_engine("vllm", checkpoint=resolve_checkpoint(MODEL), version="v0", dtype="native",
                         max_model_len=2048, enforce_eager=True, cpu_reserved_cores=0, **extra)
    if args.kind == "chat":
        prompts = chat_prompts()
        params = SamplingParams(n=8, temperature=0.8, top_p=args.top_p, max_tokens=args.max_tokens, seed=0)
    else:
        prompts = soar_prompts(4)
        params = SamplingParams(n=4, temperature=1.0, min_p=0.05, max_tokens=args.max_tokens, seed=0)
    engine.generate(prompts, params)  # untimed: kernels' first calls
    engine.llm.reset_prefix_cache()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        started = time.perf_counter()
        rows = engine.generate(prompts, params)
        wall = time.perf_counter() - started
    tokens = sum(c.completion_tokens for row in rows for c in row)
    events = [e for e in prof.key_averages() if not e.key.startswith("ProfilerStep")]
    by_group: dict[str, float] = defaultdict(float)
    for e in events:
        by_group[group_of(e.key)] += e.self_cpu_time_total / 1e6
    ops = sum(by_group.values())
    print(f"{args.kind}: {len(prompts)} prompts x n={params.n} x <= {params.max_tokens} tokens, top_p {params.top_p}, "
          f"{torch.get_num_threads()} threads: {tokens} completion tokens in {wall:.2f} s = {tokens / wall:.0f} tok/s")
    print(f"operators' own CPU time {ops:.2f} s ({ops / wall:.0%} of the wall; threads inside an operator count once)")
    for group, seconds in sorted(by_group.items(), key=lambda kv: -kv[1]):
        print(f"  {group}: {seconds:.2f} s = {seconds / wall:.1%} of the wall")
    print(f"  outside any operator (Python: scheduler, inputs, outputs): {max(wall - ops, 0):.2f} s = "
          f"{max(wall - ops, 0) / wall:.1%} of the wall")
    print(f"top {args.top} operators by own CPU time:")
    for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:args.top]:
        print(f"  {e.key[:70]:70s} {e.count:7d} calls {e.self_cpu_time_total / 1e6:7.3f} s  [{group_of(e.key)}]")
    engine.close()


if __name__ == "__main__":
    main()
