"""SOAR-shaped sampling: n samples of one long prompt with one shared prefill vs n prefills.

    python -m benchmarks.bench_prefill       # or: make bench; tiny random-weight model, ~1 min

A compact ARC prompt is hundreds of tokens and a DSL program body a dozen, so prefill is
most of the work; the transformers engine runs it once per prompt and copies the KV cache
(`TransformersEngine._generate_shared`). Both paths sample the same prompt with the same
settings in one process; rounds alternate so background load hits them alike, and the
median of each is reported. Also times the DSL grammar constraint (SamplingParams.regex).

Then across requests, with the demo's shipped seed model and sampling settings: one task's
next sampling request (n=16) and a refinement request (16 prompts, one per parent), with
the engine's prefix cache off and on (warm: the task's earlier requests went before),
alternating; the speed-up is what the cache gives each kind of request on its own.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.bench_sampling import random_model
from common.sampling import SamplingParams
from evolution.programs import body_regex, colours
from evolution.prompts import CODE_PREFIX, refinement_prompt, sampling_prompt
from evolution.records import Candidate
from evolution.tasks import load_split
from search.engines.hf import TransformersEngine

ROUNDS = 5
DEMO_MODEL = "models/soar-demo-seed"
PARENTS = ["    grid = rot90(grid)\n", "    grid = flipud(grid)\n    grid = rot90(grid)\n", "    grid = transpose(grid)\n",
           "    grid = fliplr(grid)\n"]


def main() -> None:
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
    across_requests()


def across_requests(task_id: str = "3906de3d") -> None:
    """A task's sampling and refinement requests with the prefix cache off and on."""
    task = load_split("arc1-train")[task_id].without_answers()
    regex = body_regex(colours=colours([ex.input for ex in task.train + task.test] + [ex.output for ex in task.train]))

    def refine(r: int) -> list[str]:
        """16 parents' refinement prompts; each round's parents are new (outputs shifted by r)."""
        shift = lambda grid: [[(v + r) % 10 for v in row] for row in grid]  # noqa: E731
        return [refinement_prompt(task, Candidate(
            task_id=task_id, code=CODE_PREFIX + PARENTS[i % len(PARENTS)], code_hash=str(i),
            train_correct=tuple((i + j) % 2 == 0 for j in range(len(task.train))),
            train_outputs=tuple(shift(ex.input) for ex in task.train),
            test_outputs=tuple(shift(ex.input) for ex in task.test)), "compact", 1900) for i in range(16)]

    sample = [sampling_prompt(task, "compact")]
    engines = {"off": TransformersEngine(DEMO_MODEL, num_threads=1, prefix_cache_bytes=0),
               "on": TransformersEngine(DEMO_MODEL, num_threads=1)}
    kinds = {"sampling n=16": (lambda r: sample, 16), "refinement 16 prompts": (refine, 1)}
    print(f"\nacross requests ({DEMO_MODEL}, task {task_id}, prompts {len(engines['on'].encode(sample, SamplingParams())[0])}"
          f"-{max(len(x) for x in engines['on'].encode(refine(0), SamplingParams()))} tokens, max_tokens 64, 1 thread)")
    print(f"{'request':22s} {'cache off s':>11s} {'cache on s':>10s} {'speed-up':>8s}")
    for kind, (prompts, n) in kinds.items():
        times: dict[str, list[float]] = {"off": [], "on": []}
        for r in range(ROUNDS + 1):  # round 0 warms the cache (the task's earlier requests)
            for name, engine in engines.items():
                params = SamplingParams(n=n, temperature=1.0, min_p=0.05, max_tokens=64, seed=r, regex=regex)
                started = time.perf_counter()
                engine.generate(prompts(r), params)
                if r:
                    times[name].append(time.perf_counter() - started)
        off, on = statistics.median(times["off"]), statistics.median(times["on"])
        print(f"{kind:22s} {off:11.3f} {on:10.3f} {off / on:8.1f}")
    print(f"prefix cache: {engines['on'].stats()['prefix_cache']}")


if __name__ == "__main__":
    main()
