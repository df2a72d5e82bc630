"""The demo search's sampler requests replayed on the transformers engine's prefix levers.

    python -m benchmarks bench_soar_replay    # ~10 min on a quiet 2-core machine

bench_soar times whole searches (Ray, verification, the driver); this isolates the engine:
the demo config's search (samples_per_task=32, refinements_per_task=16, as bench_soar) runs
once in this process with the engine's defaults and a private redis-server, recording every
request; then each request is replayed on four engines one after another (so load drift
hits them alike): no prefix reuse, the prefix cache alone, shared-prefix decoding alone, and
both (the defaults). Prints the seconds per request kind, each setting's speed-up over no
reuse, and whether every setting's completions equal the no-reuse engine's (seeded sampling).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from common.config import load_config
from evolution.backends import local_sampler, local_verifier
from evolution.config import SoarConfig
from evolution.driver import SoarSearch
from evolution.tasks import load_split
from search.engines.hf import TransformersEngine
from store import Store
from store.server import ensure_local_server, stop_local_server
from verifiers.arc import ArcExecutor

SETTINGS = {"off": dict(prefix_cache_bytes=0, shared_prefix=False), "cache only": dict(shared_prefix=False),
            "shared only": dict(prefix_cache_bytes=0), "on": {}}


def record(cfg: SoarConfig) -> list:
    """The (prompts, params) of every sampler request of one demo search."""
    arc = load_split(cfg.tasks.split)
    engine = TransformersEngine(cfg.model.checkpoint, version="v0", num_threads=1)
    inner, log = local_sampler(engine), []

    async def sampler(prompts, params):
        log.append((list(prompts), params))
        return await inner(prompts, params)

    with tempfile.TemporaryDirectory() as tmp:
        server = ensure_local_server(Path(tmp))
        try:
            with ArcExecutor(workers=1, allowed_modules=("evolution.dsl",)) as executor:
                search = SoarSearch(cfg.search, sampler=sampler, verifier=local_verifier(executor),
                                    archive=Store.connect(server.url).archive("replay"), model_version="v0")
                asyncio.run(search.run({t: arc[t] for t in cfg.tasks.ids}))
        finally:
            stop_local_server(Path(tmp))
    return log


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(prog="python -m benchmarks.bench_soar_replay", description=__doc__.split("\n\n")[0]).parse_args(argv)
    cfg = load_config("configs/soar-demo.yaml", SoarConfig, ["search.samples_per_task=32", "search.refinements_per_task=16"])
    requests = record(cfg)
    engines = {name: TransformersEngine(cfg.model.checkpoint, num_threads=1, **kw) for name, kw in SETTINGS.items()}
    seconds = {name: {"sampling": 0.0, "refinement": 0.0} for name in SETTINGS}
    outputs: dict[str, list] = {name: [] for name in SETTINGS}
    for prompts, params in requests:
        kind = "sampling" if params.n > 1 else "refinement"
        for name, engine in engines.items():
            started = time.perf_counter()
            rows = engine.generate(prompts, params)
            seconds[name][kind] += time.perf_counter() - started
            outputs[name].append([[c.text for c in row] for row in rows])
    print(f"\n{len(requests)} requests of the demo search, 1 thread")
    print(f"{'prefix levers':12s} {'sampling s':>10s} {'refinement s':>12s} {'total s':>8s} {'speed-up':>8s} {'equal':>5s}")
    base = sum(seconds["off"].values())
    for name in SETTINGS:
        total = sum(seconds[name].values())
        print(f"{name:12s} {seconds[name]['sampling']:10.1f} {seconds[name]['refinement']:12.1f} {total:8.1f} "
              f"{base / total:8.2f} {str(outputs[name] == outputs['off']):>5s}")
    print(f"hit rate (on): {engines['on'].stats()['prefix_cache']['hit_rate']:.2f}")


if __name__ == "__main__":
    main()
