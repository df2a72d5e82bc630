"""The regex constraint's masks per automaton state against the vocabulary scan, on the demo search.

    python -m benchmarks bench_regex    # a few minutes on a quiet 2-core machine

The demo config's search (as bench_soar_replay: samples_per_task=32, refinements_per_task=16)
runs once in this process, recording every sampler request (each carries its task's DSL
grammar as SamplingParams.regex); then every request is replayed on two engines with the
defaults, one after the other per request (so load drift hits both alike): the automaton's
masks (regex_automaton=True, the default) and the scan of every token per completion text
(regex_automaton=False, the previous way). Prints the seconds of each, the speed-up, the time
inside the logits processor, and whether every completion is equal (seeded sampling).
"""

from __future__ import annotations

import argparse
import time

from benchmarks.bench_soar_replay import record
from common.config import load_config
from evolution.config import SoarConfig
from search.engines import regex_constraint
from search.engines.hf import TransformersEngine

SETTINGS = {"scan": False, "automaton": True}


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(prog="python -m benchmarks.bench_regex", description=__doc__.split("\n\n")[0]).parse_args(argv)
    cfg = load_config("configs/soar-demo.yaml", SoarConfig, ["search.samples_per_task=32", "search.refinements_per_task=16"])
    requests = record(cfg)
    engines = {name: TransformersEngine(cfg.model.checkpoint, num_threads=1, regex_automaton=on)
               for name, on in SETTINGS.items()}
    seconds = {name: 0.0 for name in SETTINGS}
    in_mask = {name: 0.0 for name in SETTINGS}
    outputs: dict[str, list] = {name: [] for name in SETTINGS}
    call = regex_constraint.RegexLogitsProcessor.__call__
    spent = [0.0]

    def timed(self, input_ids, scores):  # the processor's own time, for the split
        started = time.perf_counter()
        try:
            return call(self, input_ids, scores)
        finally:
            spent[0] += time.perf_counter() - started

    regex_constraint.RegexLogitsProcessor.__call__ = timed
    try:
        for prompts, params in requests:
            for name, engine in engines.items():
                spent[0] = 0.0
                started = time.perf_counter()
                rows = engine.generate(prompts, params)
                seconds[name] += time.perf_counter() - started
                in_mask[name] += spent[0]
                outputs[name].append([[c.text for c in row] for row in rows])
    finally:
        regex_constraint.RegexLogitsProcessor.__call__ = call
    print(f"\n{len(requests)} requests of the demo search, 1 thread, engine defaults otherwise")
    print(f"{'regex masks':12s} {'total s':>8s} {'in mask s':>9s} {'mask share':>10s} {'equal':>5s}")
    for name in SETTINGS:
        print(f"{name:12s} {seconds[name]:8.1f} {in_mask[name]:9.2f} {in_mask[name] / seconds[name]:10.1%} "
              f"{str(outputs[name] == outputs['scan']):>5s}")
    print(f"automaton/scan speed-up {seconds['scan'] / seconds['automaton']:.2f} "
          f"(mask time {in_mask['scan'] / max(in_mask['automaton'], 1e-9):.1f}x less)")


if __name__ == "__main__":
    main()
