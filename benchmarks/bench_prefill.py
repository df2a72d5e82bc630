"""SOAR-shaped sampling: n samples of one long prompt with one shared prefill vs n prefills.

    python -m benchmarks.bench_prefill       # or: make bench; tiny random-weight model, ~1 min

A compact ARC prompt is hundreds of tokens and a DSL program body a dozen, so prefill is
most of the work; the transformers engine runs it once per prompt and copies the KV cache
(`TransformersEngine._generate_shared`). Both paths sample the same prompt with the same
settings in one process; rounds alternate so background load hits them alike, and the
median of each is reported. Also times the DSL grammar constraint (SamplingParams.regex).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.bench_sampling import random_model
from common.sampling import SamplingParams
from evolution.programs import body_regex
from evolution.prompts import sampling_prompt
from evolution.tasks import load_split
from search.engines.hf import TransformersEngine

ROUNDS = 5


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(prog="python -m benchmarks.bench_prefill", description=__doc__.split("\n\n")[0]).parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        engine = TransformersEngine(random_model(Path(tmp) / "model"), batch_size=64, num_threads=1)
        prompt = sampling_prompt(load_split("arc1-train")["3906de3d"].without_answers())
        tokens = len(engine.tokenizer(prompt)["input_ids"])
        print(f"prompt {tokens} tokens, max_tokens 16, 1 thread, {ROUNDS} rounds alternating")
        print(f"{'n':>3s} {'shared s':>9s} {'separate s':>10s} {'speed-up':>8s} {'+regex s':>9s}")
        for n in (16, 64):
            params = SamplingParams(n=n, temperature=1.0, max_tokens=16, seed=0)
            constrained = SamplingParams(n=n, temperature=1.0, max_tokens=16, seed=0, regex=body_regex())
            ids = engine.encode([prompt], params)[0]
            shared, separate, regex = [], [], []
            runs = ((shared, engine.generate, ([prompt], params)),
                    (separate, engine._generate_batch, ([ids] * n, params)),
                    (regex, engine.generate, ([prompt], constrained)))
            for _ in range(ROUNDS):
                for times, fn, args in runs:
                    started = time.perf_counter()
                    fn(*args)
                    times.append(time.perf_counter() - started)
            a, b, c = (statistics.median(t) for t in (shared, separate, regex))
            print(f"{n:3d} {a:9.3f} {b:10.3f} {b / a:8.1f} {c:9.3f}")


if __name__ == "__main__":
    main()
