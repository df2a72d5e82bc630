"""Foundation demo: seed model -> one SFT round as a Ray task -> new version in the registry.

    python -m ray_jobs.sft_demo                                  # local Ray, local Redis
    python -m ray_jobs.sft_demo --config configs/sft-demo.yaml sft_steps=200
    ray job submit --working-dir . -- python -m ray_jobs.sft_demo

It builds (or reuses) a tiny seed model that maps the last digit of `map 3 1 4 =>` through
the identity, fine-tunes it with TRL SFT on a new mapping, publishes the result as a new
model version in Redis, and reports held-out greedy accuracy before and after. The SOAR
job replaces this as `make demo` once it exists.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

import ray

from common.config import dump_yaml, load_config, to_dict
from store import Store
from training.checkpoints import publish
from training.corpora import digit_map
from training.evaluate import greedy_accuracy
from training.seed import SeedConfig, build_seed_model
from training.sft import SFTJobConfig, train_sft_remote

IDENTITY = "0123456789"


@dataclass
class SftDemoConfig:
    experiment: str = "sft-demo"  # registry namespace in Redis
    runs_dir: str = "runs"  # outputs go to runs_dir/experiment/
    seed_preset: str = "tiny"  # training.seed preset of the starting model
    seed_steps: int = 150  # SFT steps that build the seed model (cached afterwards)
    target_mapping: str = "7360918254"  # the new digit permutation the SFT round teaches
    sft_rows: int = 1000  # training rows for the SFT round
    sft_steps: int = 100
    learning_rate: float = 3e-3
    heldout_rows: int = 200  # evaluation rows never trained on


def run(cfg: SftDemoConfig) -> dict:

    started = time.time()
    run_dir = Path(cfg.runs_dir) / cfg.experiment
    run_dir.mkdir(parents=True, exist_ok=True)
    dump_yaml(cfg, run_dir / "config.yaml")

    store = Store.connect()
    store.experiments.create(cfg.experiment, "sft-demo", to_dict(cfg), exist_ok=True)
    store.experiments.set_status(cfg.experiment, "running")
    events = store.events(cfg.experiment)

    seed = build_seed_model(SeedConfig(preset=cfg.seed_preset, max_steps=cfg.seed_steps,
                                       corpus_kwargs={"permutation": IDENTITY}))
    print(f"[1/4] seed model {'reused from cache' if seed.cached else 'built'}: {seed.path} "
          f"({seed.info['parameters']:,} parameters, built in {seed.info['build_s']}s)")
    seed_path = str(Path(seed.path).resolve())
    base = next((m for m in store.models(cfg.experiment).list() if m.checkpoint == seed_path), None)
    if base is None:  # first run: the seed becomes a version; later runs start from it again
        base = publish(store, cfg.experiment, seed_path, parent=None, metrics=seed.info["train"], note="seed")
    print(f"[2/4] registry: {cfg.experiment} starts from {base.version} -> {base.checkpoint}")

    ray.init(ignore_reinit_error=True, include_dashboard=False, log_to_driver=False)
    rows = digit_map(n=cfg.sft_rows, seed=1, permutation=cfg.target_mapping)
    out_dir = run_dir / "checkpoints" / f"sft-{time.strftime('%Y%m%d-%H%M%S')}"  # never reuse a published dir
    sft = SFTJobConfig(model_path=base.checkpoint, output_dir=str(out_dir.resolve()), max_steps=cfg.sft_steps,
                       learning_rate=cfg.learning_rate, per_device_train_batch_size=32, disable_tqdm=True, quiet=True)
    print(f"[3/4] TRL SFT as a Ray task: {cfg.sft_steps} steps on {len(rows)} rows ...", flush=True)
    result = ray.get(train_sft_remote(sft, rows))
    new = publish(store, cfg.experiment, result.checkpoint, parent=base.version, metrics=result.metrics, note="sft-demo")
    events.emit("published", version=new.version, parent=base.version)
    print(f"      loss {result.metrics['first_loss']:.3f} -> {result.metrics['last_loss']:.3f} "
          f"in {result.metrics['wall_s']}s; published {new.version} (parent {base.version})")

    heldout = digit_map(n=cfg.heldout_rows, seed=4242, permutation=cfg.target_mapping)
    before, after = greedy_accuracy(base.checkpoint, heldout), greedy_accuracy(new.checkpoint, heldout)
    print(f"[4/4] held-out greedy accuracy on the new mapping ({len(heldout)} rows):")
    print(f"      {'version':8s} {'accuracy':>8s}\n      {base.version:8s} {before:8.2f}\n      {new.version:8s} {after:8.2f}")

    summary = {"experiment": cfg.experiment, "base_version": base.version, "new_version": new.version,
               "checkpoint": new.checkpoint, "heldout_accuracy_before": before, "heldout_accuracy_after": after,
               "train": result.metrics, "seed_cached": seed.cached, "wall_s": round(time.time() - started, 1)}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    (run_dir / "report.md").write_text(
        f"# {cfg.experiment}\n\nSeed model `{seed.path}` ({base.version}) fine-tuned with TRL SFT "
        f"({cfg.sft_steps} steps) into {new.version}.\n\n| version | held-out accuracy |\n|---|---|\n"
        f"| {base.version} | {before:.2f} |\n| {new.version} | {after:.2f} |\n\n"
        "Resolved config: [config.yaml](config.yaml); numbers: [summary.json](summary.json).\n"
    )
    store.experiments.set_status(cfg.experiment, "done")
    print(f"wrote {run_dir}/summary.json and report.md in {summary['wall_s']}s")
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ray_jobs.sft_demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=None, help="YAML of overrides (see configs/sft-demo.yaml)")
    parser.add_argument("overrides", nargs="*", help="field=value overrides, e.g. sft_steps=200")
    args = parser.parse_args(argv)
    run(load_config(args.config, SftDemoConfig, args.overrides))


if __name__ == "__main__":
    main()
