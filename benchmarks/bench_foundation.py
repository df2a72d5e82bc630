"""Foundation benchmarks: store write/read throughput and seed-model build time per preset.

    python -m benchmarks.bench_foundation          # or: make bench

Every ratio compares two things measured here, in this run, on this machine.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from store import Store
from store.server import ensure_local_server, stop_local_server

CANDIDATES = 20_000
UNPIPELINED = 2_000
TASKS = 20


def _records(n: int, tag: str) -> list[dict]:
    return [
        {"task_id": f"task{i % TASKS}", "code": f"def transform(grid):\n    return grid  # {tag} {i}\n    x = {i}",
         "model_version": "v0", "kind": "sample", "train_acc": (i % 7) / 7}
        for i in range(n)
    ]


def bench_store(fsync: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        server = ensure_local_server(Path(tmp), fsync=fsync)
        try:
            store = Store.connect(server.url)
            archive = store.archive("bench")
            recs = _records(CANDIDATES, "p")
            t = time.perf_counter()
            for i in range(0, len(recs), 500):
                archive.add_many(recs[i : i + 500])
            pipelined = CANDIDATES / (time.perf_counter() - t)
            recs = _records(UNPIPELINED, "u")
            t = time.perf_counter()
            for rec in recs:
                archive.add_many([rec])
            single = UNPIPELINED / (time.perf_counter() - t)
            t = time.perf_counter()
            n = sum(len(archive.get_task(f"task{i}")) for i in range(TASKS))
            read = n / (time.perf_counter() - t)
            cache = store.exec_cache
            items = [(f"fp{i % TASKS}", f"h{i}", {"status": ["ok"], "train_acc": 0.5}) for i in range(CANDIDATES)]
            t = time.perf_counter()
            for i in range(0, len(items), 1000):
                cache.set_many(items[i : i + 1000])
            cache_set = CANDIDATES / (time.perf_counter() - t)
            t = time.perf_counter()
            for i in range(0, len(items), 1000):
                cache.get_many([(fp, h) for fp, h, _ in items[i : i + 1000]])
            cache_get = CANDIDATES / (time.perf_counter() - t)
        finally:
            stop_local_server(Path(tmp))
    return {"pipelined": pipelined, "single": single, "read": read, "cache_set": cache_set, "cache_get": cache_get}


def bench_seed() -> dict[str, dict]:
    from training.seed import SeedConfig, build_seed_model

    out = {}
    for preset, steps in (("tiny", 300), ("small", 100)):  # small: fewer steps keep `make bench` short
        with tempfile.TemporaryDirectory() as tmp:
            cfg = SeedConfig(preset=preset, max_steps=steps, cache_dir=tmp)
            t = time.perf_counter()
            result = build_seed_model(cfg, progress=False)
            built = time.perf_counter() - t
            t = time.perf_counter()
            again = build_seed_model(cfg, progress=False)
            reused = time.perf_counter() - t
            assert again.cached
            out[preset] = {"build_s": built, "reuse_s": reused, "params": result.info["parameters"],
                           "steps": result.info["train"]["steps"], "samples_per_s": result.info["train"]["samples_per_s"]}
    return out


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(prog="python -m benchmarks.bench_foundation", description=__doc__.split("\n\n")[0]).parse_args(argv)
    print("store (candidate archive + execution cache), real redis-server, AOF:")
    results = {fsync: bench_store(fsync) for fsync in ("always", "everysec")}
    for fsync, r in results.items():
        print(
            f"  appendfsync {fsync:8s}: archive pipelined {r['pipelined']:8.0f} cand/s | one-by-one "
            f"{r['single']:6.0f} cand/s | pipelining x{r['pipelined'] / r['single']:.1f} | read-back "
            f"{r['read']:8.0f} cand/s | cache set {r['cache_set']:8.0f}/s get {r['cache_get']:8.0f}/s"
        )
    a, e = results["always"], results["everysec"]
    print(f"  durability cost (always / everysec, pipelined writes): {a['pipelined'] / e['pipelined']:.2f}")
    print("seed-model build (tokenizer + init + TRL SFT, default SeedConfig per preset):")
    for preset, r in bench_seed().items():
        print(
            f"  {preset:5s}: {r['params']:>9,} params, {r['steps']} steps, build {r['build_s']:6.1f}s "
            f"({r['build_s'] / r['steps'] * 1000:.0f} ms/step, batch 32) "
            f"{r['samples_per_s']:.0f} samples/s, cached reuse {r['reuse_s']:.2f}s"
        )


if __name__ == "__main__":
    main()
