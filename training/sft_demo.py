"""The foundation demo (`ratchet sft-demo`, ray_jobs/sft_demo.py): seed model -> one SFT round as a
Ray task -> new version in the registry -> held-out accuracy before and after.

    summary = await run_demo(SftDemoConfig(sft_steps=50), store, Path("runs/sft-demo"))

It builds (or reuses) a tiny seed model that maps the last digit of `map 3 1 4 =>` through
the identity, fine-tunes it with TRL SFT on a new mapping, publishes the result as a new
model version in Redis, and measures held-out greedy accuracy before and after.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from common.jsonio import write_json
from common.tracking import TrackingConfig, training_args
from store import Store
from training.checkpoints import publish
from training.corpora import digit_map
from training.seed import SeedConfig, build_seed_model

IDENTITY = "0123456789"
log = logging.getLogger(__name__)


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
    tracking: TrackingConfig = field(default_factory=TrackingConfig)  # TRL's report_to (e.g. [tensorboard])

    def __post_init__(self):
        for name in ("seed_steps", "sft_rows", "sft_steps", "heldout_rows"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if sorted(self.target_mapping) != list(IDENTITY):
            raise ValueError(f"target_mapping={self.target_mapping!r} must be a permutation of the digits 0-9")


async def run_demo(cfg: SftDemoConfig, store: Store, run_dir: Path) -> dict:
    """Seed model -> SFT round -> published version -> held-out accuracy before and after."""
    # imported here, not at the top: --help needs no torch or TRL
    from training.evaluate import greedy_accuracy
    from training.sft import SFTJobConfig, train_sft_remote

    started = time.time()
    events = store.events(cfg.experiment)

    seed = build_seed_model(SeedConfig(preset=cfg.seed_preset, max_steps=cfg.seed_steps,
                                       corpus_kwargs={"permutation": IDENTITY}))
    log.info("[1/4] seed model %s: %s (%s parameters, built in %ss)", "reused from cache" if seed.cached else "built",
             seed.path, f"{seed.info['parameters']:,}", seed.info["build_s"])
    seed_path = str(Path(seed.path).resolve())
    base = next((m for m in store.models(cfg.experiment).list() if m.checkpoint == seed_path), None)
    if base is None:  # first run: the seed becomes a version; later runs start from it again
        base = publish(store, cfg.experiment, seed_path, parent=None, metrics=seed.info["train"], note="seed")
    log.info("[2/4] registry: %s starts from %s -> %s", cfg.experiment, base.version, base.checkpoint)

    rows = digit_map(n=cfg.sft_rows, seed=1, permutation=cfg.target_mapping)
    name = f"sft-{time.strftime('%Y%m%d-%H%M%S')}"
    out_dir = run_dir / "checkpoints" / name  # never reuse a published dir
    # in a Ray task stderr is no terminal: the trainer's numbers come as log lines, not a bar
    sft = SFTJobConfig(model_path=base.checkpoint, output_dir=str(out_dir.resolve()), max_steps=cfg.sft_steps,
                       learning_rate=cfg.learning_rate, per_device_train_batch_size=32, disable_tqdm=True,
                       logging_steps=max(1, cfg.sft_steps // 5), **training_args(cfg.tracking, run_dir, name))
    log.info("[3/4] TRL SFT as a Ray task: %d steps on %d rows", cfg.sft_steps, len(rows))
    result = await train_sft_remote(sft, rows)
    new = publish(store, cfg.experiment, result.checkpoint, parent=base.version, metrics=result.metrics, note="sft-demo")
    events.emit("published", version=new.version, parent=base.version)
    log.info("[3/4] loss %.3f -> %.3f in %ss; published %s (parent %s)", result.metrics["first_loss"],
             result.metrics["last_loss"], result.metrics["wall_s"], new.version, base.version)

    heldout = digit_map(n=cfg.heldout_rows, seed=4242, permutation=cfg.target_mapping)
    before = greedy_accuracy(base.checkpoint, heldout, desc=f"[4/4] measure {base.version}")
    after = greedy_accuracy(new.checkpoint, heldout, desc=f"[4/4] measure {new.version}")
    log.info("[4/4] held-out greedy accuracy on the new mapping (%d rows): %s %.2f, %s %.2f", len(heldout),
             base.version, before, new.version, after)

    summary = {"experiment": cfg.experiment, "base_version": base.version, "new_version": new.version,
               "checkpoint": new.checkpoint, "heldout_accuracy_before": before, "heldout_accuracy_after": after,
               "train": result.metrics, "seed_cached": seed.cached, "wall_s": round(time.time() - started, 1)}
    write_json(run_dir / "summary.json", summary)
    (run_dir / "report.md").write_text(
        f"# {cfg.experiment}\n\nSeed model `{seed.path}` ({base.version}) fine-tuned with TRL SFT "
        f"({cfg.sft_steps} steps) into {new.version}.\n\n| version | held-out accuracy |\n|---|---|\n"
        f"| {base.version} | {before:.2f} |\n| {new.version} | {after:.2f} |\n\n"
        "Resolved config: [config.yaml](config.yaml); numbers: [summary.json](summary.json).\n"
    )
    return summary
