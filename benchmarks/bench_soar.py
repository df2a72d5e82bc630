"""SOAR on the demo tasks: search throughput, and where an iteration's time goes.

    python -m benchmarks.bench_soar          # or: make bench
    BENCH_SOAR_PREFIX_ONLY=1 python -m benchmarks bench_soar   # only the prefix cache on/off part
    BENCH_SOAR_LEVERS=off,on python -m benchmarks bench_soar    # only these prefix lever settings
    BENCH_SOAR_LEVERS="off,on,regex scan" ...   # also "on" with the regex constraint's old vocabulary scan

Runs the soar job on local Ray:
- the demo config's search (its shipped seed model, a smaller budget) with the transformers
  engine's prefix levers: off (no prefix reuse), the cross-request prefix cache alone,
  shared-prefix decoding alone, and both (the engine's defaults), at the demo's one engine
  thread, and off and on with two; a first run fills the execution cache, then each once
  forward and once backward (all warm, the palindrome cancels drift in background load);
  prints each lever's programs/s ratio, `prefix cache on/off programs/s ratio R` (both
  levers vs none, each at its faster thread count) and the hit rate (prompt tokens reused /
  prompt tokens);
then, with a quick seed model (cached under $RATCHET_HOME):
- search twice: the first run executes every distinct program, the second (a new
  experiment, the same tasks and seed) finds them in the execution cache;
- two iterations (search, learn, search) with two sampler actors: time split into search,
  hindsight dataset building and SFT, and the version switch (new checkpoint published ->
  every actor serving it).
All measured here, now, side by side.
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
import uuid
from pathlib import Path

from common.config import load_config
from evolution.config import SoarConfig
from jobs import runner
from ray_jobs import soar
from training.seed import SeedConfig, build_seed_model

QUICK_SEED = SeedConfig(
    preset="tiny", corpus="evolution.seed_corpus:seed_corpus",
    corpus_kwargs={"max_chars": 500, "max_grid": 6, "max_steps": 1}, n=800, max_steps=80, batch_size=8,
    max_length=1024, learning_rate=3e-3, words="evolution.seed_corpus:program_words",
)
# The prefix levers of the transformers engine: the cross-request prefix cache (prefix_cache_bytes)
# and decoding over a shared prefix held once (shared_prefix). "on" is the engine's defaults. Each
# at the demo config's one engine thread; "(2 threads)": the same with torch on both cores, which
# the levers off prefer (a long prefill to parallelise) and the levers on do not (the driver, the
# verifier and Ray's daemons then fight the engine's second thread), so R is also given with each
# side at its faster thread count.
LEVERS = {
    "off": "sampler.engine_kwargs={num_threads: 1, prefix_cache_bytes: 0, shared_prefix: false}",
    "off (2 threads)": "sampler.engine_kwargs={num_threads: 2, prefix_cache_bytes: 0, shared_prefix: false}",
    "cache only": "sampler.engine_kwargs={num_threads: 1, shared_prefix: false}",
    "shared only": "sampler.engine_kwargs={num_threads: 1, prefix_cache_bytes: 0}",
    "on": "sampler.engine_kwargs={num_threads: 1}",
    "on (2 threads)": "sampler.engine_kwargs={num_threads: 2}",
    # not a prefix lever: "on" with the regex constraint's vocabulary scan instead of its automaton
    "regex scan": "sampler.engine_kwargs={num_threads: 1, regex_automaton: false}",
}
DEFAULT_LEVERS = ["off", "off (2 threads)", "cache only", "shared only", "on", "on (2 threads)"]
NO_CONTROLS = ["controls.measure_models=false", "controls.random_prior=false", "controls.seed_only=false"]


def prefix_cache_ratio(runs: str, tag: str) -> None:
    """The demo search with each prefix lever off and on, side by side."""
    def search(name: str, engine_kwargs: str) -> dict:
        cfg = load_config("configs/soar-demo.yaml", SoarConfig, [
            f"experiment=bench-soar-{tag}-prefix-{name}", f"runs_dir={runs}", engine_kwargs,
            "search.samples_per_task=32", "search.refinements_per_task=16", "render_tasks=0", *NO_CONTROLS,
        ])
        return runner.execute(soar.JOB, cfg)["iterations"][0]

    kinds = [k.strip() for k in os.environ.get("BENCH_SOAR_LEVERS", ",".join(DEFAULT_LEVERS)).split(",")]
    if unknown := [k for k in kinds if k not in LEVERS] or [k for k in ("off", "on") if k not in kinds]:
        raise SystemExit(f"BENCH_SOAR_LEVERS={','.join(kinds)}: {unknown} unknown or missing; "
                         f"choose from {', '.join(LEVERS)} (off and on always)")
    search("warmup", LEVERS["on"])  # executes every program once: the runs below all hit the execution cache
    entries: dict[str, list[dict]] = {kind: [] for kind in kinds}
    load: dict[str, list[float]] = {kind: [] for kind in kinds}
    order = kinds + kinds[::-1]  # a palindrome: drift in background load hits each alike
    for i, kind in enumerate(order):
        entries[kind].append(search(re.sub(r"[^a-z0-9]+", "-", kind) + str(i), LEVERS[kind]))
        load[kind].append(os.getloadavg()[0])
    print(f"\n{'prefix levers':16s} {'programs':>8s} {'wall s':>7s} {'prog/s':>7s} {'hit rate':>8s} {'solved':>9s} {'load':>9s}")
    rate = {}
    for kind, rows in entries.items():
        programs, wall = sum(e["programs"] for e in rows), sum(e["wall_s"] for e in rows)
        reused = sum(e["prefix_cache"].get("reused_tokens", 0) for e in rows)
        prompt = sum(e["prefix_cache"].get("prompt_tokens", 0) for e in rows)
        rate[kind] = programs / wall
        hit = f"{reused / prompt:8.2f}" if prompt else f"{'-':>8s}"
        print(f"{kind:16s} {programs:8d} {wall:7.1f} {rate[kind]:7.2f} {hit} "
              f"{' '.join(format(e['solved'], '.1f') for e in rows):>9s} {' '.join(format(x, '.1f') for x in load[kind]):>9s}")
    on = entries["on"]
    hit = sum(e["prefix_cache"]["reused_tokens"] for e in on) / max(sum(e["prefix_cache"]["prompt_tokens"] for e in on), 1)
    for kind in kinds:
        if kind == "regex scan":
            print(f"on/regex scan programs/s ratio {rate['on'] / rate[kind]:.2f} (the regex automaton's gain)")
        elif kind not in ("on", "off") and "threads" not in kind:
            print(f"{kind}/off programs/s ratio {rate[kind] / rate['off']:.2f}; on/{kind} {rate['on'] / rate[kind]:.2f}")
    same = f"at 1 thread (the demo's) {rate['on'] / rate['off']:.2f}"
    if "off (2 threads)" in rate or "on (2 threads)" in rate:
        best_on = max(("on", "on (2 threads)"), key=lambda k: rate.get(k, 0.0))
        best_off = max(("off", "off (2 threads)"), key=lambda k: rate.get(k, 0.0))
        if "on (2 threads)" in rate and "off (2 threads)" in rate:
            same += f", at 2 threads {rate['on (2 threads)'] / rate['off (2 threads)']:.2f}"
        print(f"prefix cache on/off programs/s ratio {rate[best_on] / rate[best_off]:.2f} (each at its faster thread "
              f"count: {best_on}, {best_off}; {same}; hit rate {hit:.2f}; goal >= 2)")
    else:
        print(f"prefix cache on/off programs/s ratio {rate['on'] / rate['off']:.2f} ({same}; hit rate {hit:.2f}; "
              "goal >= 2; on: the engine's defaults, off: prefix_cache_bytes=0 and shared_prefix=false)")


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(prog="python -m benchmarks.bench_soar", description=__doc__.split("\n\n")[0]).parse_args(argv)
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    tag = uuid.uuid4().hex[:6]
    with tempfile.TemporaryDirectory() as runs:
        prefix_cache_ratio(runs, tag)
    if os.environ.get("BENCH_SOAR_PREFIX_ONLY"):
        ray.shutdown()
        return
    started = time.time()
    seed = build_seed_model(QUICK_SEED, progress=False)
    print(f"seed model {'reused' if seed.cached else 'built'} in {time.time() - started:.0f}s: {seed.path}")
    with tempfile.TemporaryDirectory() as runs:
        rows = []
        for attempt in ("cold", "warm"):
            cfg = load_config("configs/soar-demo.yaml", SoarConfig, [
                f"experiment=bench-soar-{tag}-{attempt}", f"runs_dir={runs}", f"model.checkpoint={seed.path}",
                "search.samples_per_task=32", "search.refinements_per_task=16", "render_tasks=0", *NO_CONTROLS,
            ])
            e = runner.execute(soar.JOB, cfg)["iterations"][0]
            executed = e["executions"] + e["cache_hits"]
            rows.append((attempt, e, e["cache_hits"] / executed if executed else 0.0))
        print(f"\n{'run':5s} {'tasks':>5s} {'programs':>8s} {'prog/s':>7s} {'sampler busy':>12s} {'cache hit':>9s} {'solved':>6s}")
        for attempt, e, hit in rows:
            print(f"{attempt:5s} {e['tasks']:5d} {e['programs']:8d} {e['programs'] / e['wall_s']:7.1f} "
                  f"{e['sampler_busy_frac']:12.2f} {hit:9.2f} {e['solved']:6.2f}")
        print(f"(run dirs were in {Path(runs)}; goal: sampler busy >= 0.9)")

        cfg = load_config("configs/soar-demo.yaml", SoarConfig, [
            f"experiment=bench-soar-{tag}-learn", f"runs_dir={runs}", f"model.checkpoint={seed.path}",
            "iterations=2", "search.samples_per_task=32", "search.refinements_per_task=16", "render_tasks=0",
            "learn.max_steps=40", "sampler.num_actors=2", "sampler.num_cpus_per_actor=0.25", *NO_CONTROLS,
        ])
        entries = runner.execute(soar.JOB, cfg)["iterations"]
        print(f"\n{'iteration':9s} {'search s':>8s} {'dataset s':>9s} {'train s':>7s} {'switch s':>8s} {'rows':>5s}")
        for e in entries:
            t = e["timing"]
            print(f"{e['iteration']:<9d} {t['search_s']:8.1f} {t.get('dataset_s', 0):9.1f} {t.get('train_s', 0):7.1f} "
                  f"{t.get('switch_s', 0):8.2f} {e.get('hindsight', {}).get('rows', 0):5d}")
        print("(switch: the new version published -> both sampler actors serving it; "
              f"SFT {cfg.learn.max_steps} steps, batch {cfg.learn.batch_size})")
    ray.shutdown()


if __name__ == "__main__":
    main()
