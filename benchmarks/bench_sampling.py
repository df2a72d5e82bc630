"""Sampling throughput: the bare engine vs the SamplerPool vs the HTTP endpoint, in one run.

    python -m benchmarks.bench_sampling                  # tiny random-weight model, ~1-2 min
    python -m benchmarks.bench_sampling --model PATH --engine-threads 4 --max-tokens 128
    python -m benchmarks.bench_sampling --busy-cores 1     # with one core kept busy in the background

All four modes sample the same prompts with the same settings, split into the same requests
(`--per-request` prompts each), with the same CPU threads per engine; rounds alternate the
modes (in order, then in reverse) so background load hits them alike, and each mode's median
round is reported, with its ratio to the engine's as a ratio of medians and as the median of
per-round ratios (paired):
  engine   the transformers engine in this process, one request after another
  pool1    SamplerPool, 1 actor          (goal: >= 0.95 x engine)
  http     ratchet serve over a 1-actor pool, via the openai engine (goal: >= 0.9 x engine)
  pool2    SamplerPool, 2 actors         (scaling, reported as measured)
  pool1@N  with --also-niceness N: a 1-actor pool at niceness N (the others run at Ray's
           default for workers, 15), to see what the actors' priority is worth
A random-weight model rarely emits EOS, so nearly every completion runs to max_tokens.

Where the time goes: for each mode, the CPU seconds every process of this run used during
its rounds (from /proc, Linux), per 1,000 tokens, by process: the driver (the bare engine,
the pool's client side, the openai client), `ray::SamplerWorker` (the engines in actors),
`ray::ServeReplica` (parsing, validation, serialisation, the pool's router), `ray::ProxyActor`
(Serve's HTTP proxy), and Ray's own `raylet`/`gcs_server`. On a machine with few cores, what
the proxy and the replica use is taken from the engine.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from common.ports import free_port
from common.procs import pids, ppid
from common.sampling import Completion, SamplingParams

GOAL = {"pool1": 0.95, "http": 0.9}  # tokens/s over the bare engine's (issue #16)


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


def _process_name(pid: int) -> str:
    """The Ray actor class of a worker (its process title), else the program's name."""
    argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    if argv0.startswith("ray::"):
        return argv0.split(":")[2] if argv0.startswith("ray::ServeReplica") else argv0.split()[0]
    return "driver" if pid == os.getpid() else Path(argv0).name


def process_cpu(exclude: frozenset[int] = frozenset()) -> dict[str, float]:
    """CPU seconds used so far by this process and all its descendants (Ray's), by name;
    `exclude`: pids left out (the background load)."""
    if not Path("/proc/self/stat").exists():
        return {}
    parents = {pid: ppid(pid) for pid in pids()}  # 0: gone meanwhile
    ours, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, up in parents.items() if up == parent and pid not in ours]
        ours.update(children)
        frontier.extend(children)
    tick = os.sysconf("SC_CLK_TCK")
    cpu: dict[str, float] = defaultdict(float)
    for pid in ours - exclude:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cpu[_process_name(pid)] += (int(fields[11]) + int(fields[12])) / tick  # utime + stime
        except (OSError, IndexError, ValueError):
            pass
    return dict(cpu)


def _spin() -> None:
    """Background load: one core kept busy (--busy-cores)."""
    while True:
        pass


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_sampling", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="checkpoint dir (default: a tiny random-weight model)")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--per-request", type=int, default=16, help="prompts per request in every mode")
    parser.add_argument("--engine-threads", type=int, default=1, help="torch threads of every engine")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy-cores", type=int, default=0, help="background processes spinning a core each")
    parser.add_argument("--also-niceness", type=int, default=None,
                        help="also a 1-actor pool at this niceness (0: as the bare engine; the others: Ray's 15)")
    args = parser.parse_args(argv)
    busy = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.busy_cores)]
    for p in busy:
        p.start()
    spinners = frozenset(p.pid for p in busy)

    import ray

    from jobs.serving import run as serve_run
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
    # Fractional CPUs so every pool's actors fit the 2 logical CPUs (5 with --also-niceness, the
    # endpoint's included); only one works at a time.
    pool_cfg = dict(engine_kwargs=engine_kwargs, num_cpus_per_actor=0.3, prompts_per_request=args.per_request)
    engine = make_engine("transformers", checkpoint=model, **engine_kwargs)
    pool1 = SamplerPool(PoolConfig(num_actors=1, **pool_cfg), checkpoint=model)
    pool2 = SamplerPool(PoolConfig(num_actors=2, **pool_cfg), checkpoint=model)
    pools = [pool1, pool2]
    if args.also_niceness is not None:
        pools.append(SamplerPool(PoolConfig(num_actors=1, niceness=args.also_niceness, **pool_cfg), checkpoint=model))

    async def ready() -> None:
        await asyncio.gather(*(p.ready() for p in pools))

    # The pools load first: on a busy machine, Serve's proxy starting alongside three model
    # loads can miss Serve's fixed 60 s start-up timeout.
    asyncio.run(ready())
    url = serve_run(ServeSettings(pool=PoolConfig(num_actors=1, **pool_cfg), checkpoint=model, model_name="bench"),
                    port=free_port(), blocking=False)
    client = OpenAIEngine(url, model="bench", prompts_per_request=args.per_request, max_concurrency=4)
    modes: dict[str, Callable[[], list[list[Completion]]]] = {
        "engine": lambda: [row for chunk in chunks for row in engine.generate(chunk, params)],
        "pool1": lambda: pool1.generate_sync(prompts, params),
        "http": lambda: client.generate(prompts, params),
        "pool2": lambda: pool2.generate_sync(prompts, params),
    }
    if args.also_niceness is not None:
        modes[f"pool1@{args.also_niceness}"] = lambda: pools[2].generate_sync(prompts, params)
    for run in modes.values():  # warm-up: first-call costs (allocator, HTTP connections)
        run()
    rates: dict[str, list[float]] = {name: [] for name in modes}
    counts: dict[str, int] = {}
    cpu: dict[str, dict[str, float]] = {name: defaultdict(float) for name in modes}
    load = os.getloadavg()
    for i in range(args.rounds):
        # forward, then backward: no mode always follows the same one (pool2's two actors, say)
        for name in (list(modes) if i % 2 == 0 else list(reversed(modes))):
            run = modes[name]
            before = process_cpu(spinners)
            n_tokens, seconds = timed(run)
            for proc, used in process_cpu(spinners).items():
                cpu[name][proc] += used - before.get(proc, 0.0)
            rates[name].append(n_tokens / seconds)
            counts[name] = n_tokens

    median = {name: statistics.median(r) for name, r in rates.items()}
    # Each round's ratio to the engine's in the same round (seconds apart): slow drift in
    # background load cancels in the pair, where a ratio of medians mixes rounds a minute apart.
    paired = {name: statistics.median(r / e for r, e in zip(rates[name], rates["engine"], strict=True))
              for name in modes}
    paired["pool2"] = statistics.median(b / a for a, b in zip(rates["pool1"], rates["pool2"], strict=True))
    print(f"\nsampling throughput: {args.prompts} prompts x n={args.n}, max_tokens={args.max_tokens}, "
          f"{args.per_request} prompts/request, {args.engine_threads} thread(s)/engine, "
          f"{args.busy_cores} busy background core(s), "
          f"median of {args.rounds} rounds\nmodel {model}")
    print(f"{'mode':8} {'tokens':>7} {'tok/s':>9} {'ratio':>7} {'paired':>7}  rounds (tok/s)")
    for name in modes:
        ratio = median[name] / median["engine"]
        label = {"pool1": f"pool1/engine (goal >= {GOAL['pool1']})", "http": f"http/engine (goal >= {GOAL['http']})",
                 "pool2": "pool2/pool1 (2 actors)"}.get(name, "")
        if name == "pool2":
            ratio = median["pool2"] / median["pool1"]
        print(f"{name:8} {counts[name]:7d} {median[name]:9.1f} {ratio:7.2f} {paired[name]:7.2f}  "
              f"{' '.join(f'{r:.0f}' for r in rates[name])}  {label}")
    print("(ratio: of the modes' median rounds; paired: the median of each round's ratio to the engine's "
          "in the same round)")
    print(f"load average before the rounds {load[0]:.2f}, after {os.getloadavg()[0]:.2f} "
          f"({os.cpu_count()} CPUs)")
    print("\nwhere the time goes: CPU seconds per 1,000 tokens, by process, during each mode's rounds")
    for name in modes:
        used = {p: s for p, s in sorted(cpu[name].items(), key=lambda kv: -kv[1]) if s >= 0.005 * args.rounds}
        per_k = 1000 / (counts[name] * args.rounds)
        total = sum(cpu[name].values()) * per_k
        print(f"{name:8} total {total:6.2f}  " + "  ".join(f"{p} {s * per_k:.2f}" for p, s in used.items()))
    from ray import serve

    serve.shutdown()
    for pool in pools:
        pool.shutdown()
    ray.shutdown()
    for p in busy:
        p.terminate()


if __name__ == "__main__":
    main()
