"""Sampling throughput: the bare engine vs the SamplerPool vs the HTTP endpoint, in one run.

    python -m benchmarks.bench_sampling                  # tiny random-weight model, ~1-2 min
    python -m benchmarks.bench_sampling --model PATH --engine-threads 4 --max-tokens 128

All four modes sample the same prompts with the same settings, split into the same requests
(`--per-request` prompts each), with the same CPU threads per engine; rounds alternate the
modes so background load hits them alike, and each mode's median round is reported:
  engine   the transformers engine in this process, one request after another
  pool1    SamplerPool, 1 actor          (goal: >= 0.9 x engine)
  http     ratchet serve over a 1-actor pool, via the openai engine (goal: >= 0.9 x engine)
  pool2    SamplerPool, 2 actors         (scaling, reported as measured)
A random-weight model rarely emits EOS, so nearly every completion runs to max_tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from common.sampling import Completion, SamplingParams

GOAL = 0.9  # pool and endpoint tokens/s over the bare engine's


def random_model(path: Path) -> str:
    """A tiny Llama with random weights (no training: ready in a second), cached at path."""
    if not (path / "config.json").exists():
        from training.corpora import digit_map
        from training.seed import SeedConfig, init_model
        from training.tokenizer import train_tokenizer

        rows = digit_map(n=200)
        tokenizer = train_tokenizer((r["prompt"] + r["completion"] for r in rows), vocab_size=259)
        path.mkdir(parents=True, exist_ok=True)
        init_model(SeedConfig(preset="tiny"), tokenizer, path)
    return str(path)


def tokens(rows: list[list[Completion]]) -> int:
    return sum(c.completion_tokens for row in rows for c in row)


def timed(run: Callable[[], list[list[Completion]]]) -> tuple[int, float]:
    started = time.perf_counter()
    rows = run()
    return tokens(rows), time.perf_counter() - started


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_sampling", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="checkpoint dir (default: a tiny random-weight model)")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--per-request", type=int, default=16, help="prompts per request in every mode")
    parser.add_argument("--engine-threads", type=int, default=1, help="torch threads of every engine")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    import ray

    from ray_jobs.serve import run as serve_run
    from search.engines import make_engine
    from search.engines.openai_engine import OpenAIEngine
    from search.pool import PoolConfig, SamplerPool
    from search.serve import ServeSettings
    from store.server import ratchet_home

    model = args.model or random_model(ratchet_home() / "models" / "bench-random-tiny")
    prompts = [f"map {i % 10} {(7 * i) % 10} {(3 * i) % 10} =>" for i in range(args.prompts)]
    params = SamplingParams(n=args.n, temperature=1.0, max_tokens=args.max_tokens, seed=0)
    chunks = [prompts[s : s + args.per_request] for s in range(0, len(prompts), args.per_request)]
    engine_kwargs = {"num_threads": args.engine_threads}

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    # Fractional CPUs so all three pools fit the 2 logical CPUs; only one works at a time.
    pool_cfg = dict(engine_kwargs=engine_kwargs, num_cpus_per_actor=0.5, prompts_per_request=args.per_request)
    engine = make_engine("transformers", checkpoint=model, **engine_kwargs)
    pool1 = SamplerPool(PoolConfig(num_actors=1, **pool_cfg), checkpoint=model)
    pool2 = SamplerPool(PoolConfig(num_actors=2, **pool_cfg), checkpoint=model)
    url = serve_run(ServeSettings(pool=PoolConfig(num_actors=1, **pool_cfg), checkpoint=model, model_name="bench"),
                    port=free_port(), blocking=False)
    client = OpenAIEngine(url, model="bench", prompts_per_request=args.per_request, max_concurrency=4)

    async def ready() -> None:
        await asyncio.gather(pool1.ready(), pool2.ready())

    asyncio.run(ready())
    modes: dict[str, Callable[[], list[list[Completion]]]] = {
        "engine": lambda: [row for chunk in chunks for row in engine.generate(chunk, params)],
        "pool1": lambda: pool1.generate_sync(prompts, params),
        "http": lambda: client.generate(prompts, params),
        "pool2": lambda: pool2.generate_sync(prompts, params),
    }
    for run in modes.values():  # warm-up: first-call costs (allocator, HTTP connections)
        run()
    rates: dict[str, list[float]] = {name: [] for name in modes}
    counts: dict[str, int] = {}
    for _ in range(args.rounds):
        for name, run in modes.items():
            n_tokens, seconds = timed(run)
            rates[name].append(n_tokens / seconds)
            counts[name] = n_tokens

    median = {name: statistics.median(r) for name, r in rates.items()}
    print(f"\nsampling throughput: {args.prompts} prompts x n={args.n}, max_tokens={args.max_tokens}, "
          f"{args.per_request} prompts/request, {args.engine_threads} thread(s)/engine, "
          f"median of {args.rounds} rounds\nmodel {model}")
    print(f"{'mode':8} {'tokens':>7} {'tok/s':>9} {'ratio':>7}  rounds (tok/s)")
    for name in modes:
        ratio = median[name] / median["engine"]
        label = {"pool1": f"pool1/engine (goal >= {GOAL})", "http": f"http/engine (goal >= {GOAL})",
                 "pool2": "pool2/pool1 (2 actors)"}.get(name, "")
        if name == "pool2":
            ratio = median["pool2"] / median["pool1"]
        print(f"{name:8} {counts[name]:7d} {median[name]:9.1f} {ratio:7.2f}  "
              f"{' '.join(f'{r:.0f}' for r in rates[name])}  {label}")
    from ray import serve

    serve.shutdown()
    pool1.shutdown()
    pool2.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()
