"""SOAR search throughput on the demo tasks: sampler busy fraction, cache hits, programs/s.

    python -m benchmarks.bench_soar          # or: make bench

Runs the soar job twice on local Ray with a quick seed model (cached under $RATCHET_HOME):
the first run executes every distinct program, the second (a new experiment, the same
tasks and seed) finds them in the execution cache. Both runs are measured here, now.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path

from common.config import load_config
from ray_jobs.soar import SoarConfig, run
from training.seed import SeedConfig, build_seed_model

QUICK_SEED = SeedConfig(
    preset="tiny", corpus="evolution.seed_corpus:seed_corpus",
    corpus_kwargs={"max_chars": 500, "max_grid": 6, "max_steps": 1}, n=800, max_steps=80, batch_size=8,
    max_length=1024, learning_rate=3e-3,
)


def main() -> None:
    import ray

    started = time.time()
    seed = build_seed_model(QUICK_SEED, progress=False)
    print(f"seed model {'reused' if seed.cached else 'built'} in {time.time() - started:.0f}s: {seed.path}")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    tag = uuid.uuid4().hex[:6]
    with tempfile.TemporaryDirectory() as runs:
        rows = []
        for attempt in ("cold", "warm"):
            cfg = load_config("configs/soar-demo.yaml", SoarConfig, [
                f"experiment=bench-soar-{tag}-{attempt}", f"runs_dir={runs}", f"model.checkpoint={seed.path}",
                "search.samples_per_task=32", "search.refinements_per_task=16", "render_tasks=0",
            ])
            e = run(cfg)["iterations"][0]
            executed = e["executions"] + e["cache_hits"]
            rows.append((attempt, e, e["cache_hits"] / executed if executed else 0.0))
        print(f"\n{'run':5s} {'tasks':>5s} {'programs':>8s} {'prog/s':>7s} {'sampler busy':>12s} {'cache hit':>9s} {'solved':>6s}")
        for attempt, e, hit in rows:
            print(f"{attempt:5s} {e['tasks']:5d} {e['programs']:8d} {e['programs'] / e['wall_s']:7.1f} "
                  f"{e['sampler_busy_frac']:12.2f} {hit:9.2f} {e['solved']:6.2f}")
        print(f"(run dirs were in {Path(runs)}; goal: sampler busy >= 0.9)")
    ray.shutdown()


if __name__ == "__main__":
    main()
