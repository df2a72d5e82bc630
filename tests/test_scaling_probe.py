"""scaling/probe.py seeds (scripts/scaling_probe.py seeds): runs of one config at several
sample_seeds, pooled per question."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from scaling import probe as scaling_probe
from scaling.curves import CurvesConfig, compute_curves
from search.scored_pool import ScoredPool, synthetic_pool


def saved_pools(tmp_path: Path, seeds=(1, 2, 3), questions=40) -> list[str]:
    paths = []
    for s in seeds:
        path = tmp_path / f"s{s}" / "pool.npz"
        path.parent.mkdir()
        pool = synthetic_pool(questions, 8, 4, seed=s, true_positive=0.8, false_positive=0.3)
        pool.question_ids = [f"q{i}" for i in range(questions)]  # one question set, new candidates per seed
        pool.save(path)
        paths.append(str(path))
    return paths


def figures(out: str) -> dict[str, list[float]]:
    """Each printed signal's values in order: one per seed, then the pooled mean."""
    found: dict[str, list[float]] = {}
    for name, value in re.findall(r"^  ([^:\n]+): ([+-]\d\.\d+)", out, re.M):
        found.setdefault(name, []).append(float(value))
    return found


def test_seeds_prints_each_runs_report_difference_and_their_per_question_mean(tmp_path, capsys):
    paths = saved_pools(tmp_path)
    scaling_probe.main(["seeds", *paths, "--bootstrap", "200"])
    got = figures(capsys.readouterr().out)
    expected = []
    for path in paths:  # what each run's own report says at the largest k (default curve settings)
        pool = ScoredPool.load(path)
        rows = compute_curves(pool, CurvesConfig()).differences
        (row,) = [d for d in rows if d["k"] == 8 and d["strategy"] == "verification"]
        expected.append(row["difference"])
    ver = got["verification - consistency"]
    assert ver[:3] == pytest.approx(expected, abs=5e-4)
    assert ver[3] == pytest.approx(np.mean(expected), abs=5e-4)  # every question in every run: mean of means
    assert "weighted_best_of_n - consistency" in got and "AUC, verifier - votes" in got


def test_seeds_against_the_same_runs_is_a_zero_difference(tmp_path, capsys):
    paths = saved_pools(tmp_path, seeds=(1, 2))
    scaling_probe.main(["seeds", *paths, "--against", *paths, "--bootstrap", "50"])
    got = figures(capsys.readouterr().out)
    assert got["AUC, verifier - against"] == [0.0, 0.0, 0.0]
    assert got["weighted_best_of_n - consistency, minus against's"] == [0.0, 0.0, 0.0]
    assert got["weighted_best_of_n - consistency"][0] != 0.0  # the rows are not zero by construction


def test_seeds_refuses_runs_that_do_not_pair(tmp_path):
    a, b = saved_pools(tmp_path, seeds=(1, 2))
    with pytest.raises(SystemExit, match="same candidates"):
        scaling_probe.main(["seeds", a, "--against", b])
    with pytest.raises(SystemExit, match="one pool per run"):
        scaling_probe.main(["seeds", a, b, "--against", a])
    other = tmp_path / "other.npz"
    synthetic_pool(30, 8, 4, seed=1).save(other)
    with pytest.raises(SystemExit, match="other questions"):
        scaling_probe.main(["seeds", a, str(other)])
