"""Scaling curves: the vectorized subsampling vs a straightforward per-question implementation.

    python -m benchmarks.bench_scaling          # or: make bench

Every curve (6 strategies; both Verification@k variants over the full k_inf x k_verif grid) for 500
questions x 256 candidates x 64 verdicts with 20 seeds, timed whole; the per-question
Python reference (search.strategies.reference) runs the same grid on a slice of questions in
this run, and its time is scaled to 500 questions. Both print; the ratio is the speed-up.
"""

from __future__ import annotations

import argparse
import time

from scaling.curves import CurvesConfig, compute_curves, powers_up_to
from search.scored_pool import synthetic_pool
from search.strategies import STRATEGIES, USES_VERDICTS, StrategyOptions
from search.strategies import reference as ref

QUESTIONS, CANDIDATES, VERDICTS, SEEDS = 500, 256, 64, 20
SLICE = 3  # questions the reference runs (default)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_scaling", description=__doc__.split("\n\n")[0])
    parser.add_argument("slice", nargs="?", type=int, default=SLICE, help="questions the per-question reference runs")
    slice_ = parser.parse_args(argv).slice
    pool = synthetic_pool(QUESTIONS, CANDIDATES, VERDICTS, seed=0)
    ks, kvs = powers_up_to(CANDIDATES), powers_up_to(VERDICTS)
    points = sum(len(ks) * (len(kvs) if s in USES_VERDICTS else 1) for s in STRATEGIES)
    print(f"pool {QUESTIONS} questions x {CANDIDATES} candidates x {VERDICTS} verdicts; {points} curve points "
          f"(k in {ks}, k_verif in {kvs}), {SEEDS} seeds, 1000 bootstrap resamples", flush=True)

    t = time.perf_counter()
    curves = compute_curves(pool, CurvesConfig(seeds=SEEDS, bootstrap=1000))
    fast = time.perf_counter() - t
    print(f"vectorized, all {QUESTIONS} questions: {fast:.2f}s", flush=True)

    opts = StrategyOptions()
    t = time.perf_counter()
    for name in STRATEGIES:
        for kv in (kvs if name in USES_VERDICTS else [None]):
            for k in ks:
                ref.curves_point(pool, name, k, kv, SEEDS, opts, questions=range(slice_))
    slow_slice = time.perf_counter() - t
    slow = slow_slice * QUESTIONS / slice_
    print(f"per-question Python, {slice_} questions: {slow_slice:.2f}s -> {slow:.0f}s for {QUESTIONS} (scaled)")
    print(f"speed-up: {slow / fast:.0f}x")
    top = curves.summary()["curves"]
    print("largest-k accuracy on the synthetic pool: " + ", ".join(f"{s} {rows[-1]['accuracy']:.3f}"
                                                                  for s, rows in top.items()))


if __name__ == "__main__":
    main()
