"""The SOAR demo's embedded seed model: its recipe and its held-out measurement.

The recipe is configs/soar-demo.yaml's `model.seed`, with the demo's and held-out tasks kept
out of its corpus; `make seeds` trains it into models/soar-demo-seed, which the demo config
names as `model.checkpoint`, so the demo spends its minutes on search and learning.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from common.config import load_config
from evolution.config import SoarConfig
from evolution.learn import seed_corpus_kwargs, seed_rows
from training.evaluate import greedy_accuracy
from training.seed import SeedConfig

DEMO_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "soar-demo.yaml"
HELDOUT_ROWS = 200


def _demo() -> SoarConfig:
    return load_config(DEMO_CONFIG, SoarConfig)


def demo_seed() -> SeedConfig:
    cfg = _demo()
    task_ids = sorted({*cfg.tasks.ids, *cfg.tasks.heldout_ids})
    return replace(cfg.model.seed, corpus_kwargs=seed_corpus_kwargs(cfg, task_ids))


def evaluate_demo_seed(path: str) -> dict[str, float]:
    """Greedy exact-match accuracy on fresh corpus rows (another seed than the training rows)."""
    cfg = _demo()
    rows = seed_rows(cfg, HELDOUT_ROWS, 7, sorted({*cfg.tasks.ids, *cfg.tasks.heldout_ids}))
    return {"heldout_rows": HELDOUT_ROWS,
            "greedy_exact": greedy_accuracy(path, rows, max_new_tokens=cfg.search.max_tokens)}
