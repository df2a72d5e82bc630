"""Scaling curves: grid coverage, CI sanity, the ambiguous subset, outputs on disk."""

from __future__ import annotations

import json

import numpy as np
import pytest

from scaling.curves import (
    CurvesConfig,
    bootstrap_ci,
    compute_curves,
    plot_curves,
    powers_up_to,
)
from search.scored_pool import ScoredPool, synthetic_pool


def useless_verifier_pool(questions=150, seed=4):
    """Verdicts and comparisons independent of correctness: selection is as good as chance."""
    return synthetic_pool(questions, 16, 8, seed=seed, true_positive=0.5, false_positive=0.5, compare_accuracy=0.5)


def test_ambiguous_is_decided_per_draw_and_leaves_out_what_voting_solves():
    pool = useless_verifier_pool()
    curves = compute_curves(pool, CurvesConfig(seeds=20, bootstrap=100, strategies=["consistency", "verification"]))
    amb = curves.summary()["curves_ambiguous"]["verification"]
    # k = 1: a draw is ambiguous only when its one candidate is right, so every strategy is right
    assert amb[0]["k"] == 1 and amb[0]["accuracy"] == 1.0
    # with a useless verifier, more candidates cannot make selection more accurate on ambiguous
    # draws (over the whole pool's ambiguous questions this curve used to rise with k)
    assert amb[-1]["accuracy"] < amb[0]["accuracy"] - 0.2
    # questions that full-pool majority vote solves are not in the subset
    solved = pool.consistency_solves()
    assert 0 < solved.sum() < len(solved)
    assert curves.ambiguous == int((pool.ambiguous() & ~solved).sum())


def test_differences_get_a_paired_ci_from_the_same_resampled_questions():
    good = synthetic_pool(120, 16, 8, seed=5, true_positive=0.9, false_positive=0.1)
    curves = compute_curves(good, CurvesConfig(seeds=10, bootstrap=300, strategies=["consistency", "verification"]))
    amb = np.array(curves.summary()["heatmap_ambiguous"]["accuracy"])
    assert amb[-1, -1] > amb[-1, 0]  # implicit scaling: more verdicts, better on ambiguous draws
    (row,) = [d for d in curves.differences if d["k"] == 16]
    assert row["strategy"] == "verification" and row["baseline"] == "consistency"
    assert 0 < row["ci_low"] <= row["difference"] <= row["ci_high"]
    # paired: a strategy against itself has a zero-width interval, which unpaired CIs never give
    rows = np.stack([np.linspace(0, 1, 120)] * 2)
    lo, hi = bootstrap_ci(rows[:1] - rows[1:], 200, 0.95, np.random.default_rng(0))
    assert lo[0] == hi[0] == 0.0


def test_powers_up_to_ends_at_n():
    assert powers_up_to(1) == [1]
    assert powers_up_to(12) == [1, 2, 4, 8, 12]
    assert powers_up_to(16) == [1, 2, 4, 8, 16]


def test_bootstrap_ci_brackets_the_mean_and_narrows_with_more_questions():
    rng = np.random.default_rng(0)
    small = (rng.random((1, 20)) < 0.5).astype(float)
    large = (rng.random((1, 2000)) < 0.5).astype(float)
    lo_s, hi_s = bootstrap_ci(small, 2000, 0.95, rng)
    lo_l, hi_l = bootstrap_ci(large, 2000, 0.95, rng)
    assert lo_s[0] <= small.mean() <= hi_s[0]
    assert lo_l[0] <= large.mean() <= hi_l[0]
    assert hi_l[0] - lo_l[0] < (hi_s[0] - lo_s[0]) / 3


def test_curves_cover_the_grid_and_order_sensibly(tmp_path):
    pool = synthetic_pool(80, 16, 8, seed=1)
    curves = compute_curves(pool, CurvesConfig(seeds=10, bootstrap=200))
    s = curves.summary()
    assert [p["k"] for p in s["curves"]["pass"]] == [1, 2, 4, 8, 16]
    assert np.array(s["heatmap"]["accuracy"]).shape == (5, 4)
    passes = [p["accuracy"] for p in s["curves"]["pass"]]
    assert passes == sorted(passes)  # pass@k never decreases in k
    for strategy, rows in s["curves"].items():
        for row in rows:
            assert row["ci_low"] <= row["accuracy"] + 1e-12 <= row["ci_high"] + 2e-12, strategy
            assert row["accuracy"] <= s["curves"]["pass"][[p["k"] for p in s["curves"]["pass"]].index(row["k"])]["accuracy"] + 1e-9
    # with a verifier better than chance, Verification@16 beats Consistency@16 on this pool
    assert s["curves"]["verification"][-1]["accuracy"] > s["curves"]["consistency"][-1]["accuracy"]
    # on ambiguous questions accuracy is higher (hopeless questions are gone)
    assert s["curves_ambiguous"]["verification"][-1]["accuracy"] >= s["curves"]["verification"][-1]["accuracy"]
    assert "pass" not in s["curves_ambiguous"]  # 1 by definition at every k
    assert set(s["unparsable"]) == {"verdicts", "comparisons"} and 0 < s["unparsable"]["verdicts"] < 0.05
    curves.write_csv(tmp_path / "curves.csv")
    assert len((tmp_path / "curves.csv").read_text().splitlines()) == 1 + len(curves.points)
    written = plot_curves(curves, tmp_path)
    assert {p.name for p in written} == {"heatmap.png", "curves.png", "curves_ambiguous.png"}
    assert all(p.stat().st_size > 1000 for p in written)
    json.dumps(s)  # the summary is plain JSON


def test_curves_reject_k_beyond_the_pool():
    pool = synthetic_pool(5, 8, 4)
    with pytest.raises(ValueError, match="k_inf=8"):
        compute_curves(pool, CurvesConfig(k_values=[16], seeds=1, bootstrap=10))


def test_unknown_strategy_in_config_is_an_error():
    with pytest.raises(ValueError, match="unknown"):
        CurvesConfig(strategies=["nope"])


def test_pool_round_trips_through_npz(tmp_path):
    pool = synthetic_pool(6, 5, 3, seed=2)
    pool.save(tmp_path / "pool.npz")
    back = ScoredPool.load(tmp_path / "pool.npz")
    assert back.question_ids == pool.question_ids
    np.testing.assert_array_equal(back.verdicts, pool.verdicts)
    np.testing.assert_array_equal(back.compare_counts, pool.compare_counts)


def test_pool_from_records_counts_comparisons_and_rejects_ragged_records():
    rec = {"id": "a", "answer_correct": [True, False],
           "candidates": [{"answer_id": 0, "correct": True, "verdicts": [1, -1]},
                          {"answer_id": 1, "correct": False, "verdicts": [0, 0]}],
           "comparisons": [[0, 1, 1], [1, 0, 2], [0, 1, -1]]}
    pool = ScoredPool.from_records([rec])
    # per ordered pair (first shown, second): [first won, second won, unparsable]
    assert pool.compare_counts[0, 0, 1].tolist() == [1, 0, 1]
    assert pool.compare_counts[0, 1, 0].tolist() == [0, 1, 0]
    assert pool.score[0].tolist() == [0.5, 0.0]  # the unparsable verdict counts as 0
    assert pool.unparsable_rates() == {"verdicts": 0.25, "comparisons": pytest.approx(1 / 3)}
    ragged = dict(rec, id="b", candidates=rec["candidates"][:1])
    with pytest.raises(ValueError, match="candidates per question"):
        ScoredPool.from_records([rec, ragged])


# -- edges found by `make mutate MODULES=curves` (docs/testing.md) ----------------------------------
def test_differences_are_the_strategy_minus_its_baseline_at_each_k():
    pool = synthetic_pool(60, 8, 4, seed=2)
    curves = compute_curves(pool, CurvesConfig(seeds=5, bootstrap=100, strategies=["consistency", "verification"]))
    acc = {(p.strategy, p.k): p.accuracy for p in curves.points if p.subset == "all" and p.k_verif in (None, 4)}
    assert curves.differences
    for row in curves.differences:
        assert row["difference"] == pytest.approx(acc[("verification", row["k"])] - acc[("consistency", row["k"])])


@pytest.mark.parametrize("subset", ["all", "ambiguous"])
def test_the_heatmap_holds_only_its_own_strategy_and_subset(subset):
    pool = synthetic_pool(60, 8, 4, seed=3)
    curves = compute_curves(pool, CurvesConfig(seeds=5, bootstrap=50,
                                               strategies=["consistency", "verification", "verification_tie"]))
    grid = curves.heatmap(subset)
    for p in curves.points:
        if p.strategy == "verification" and p.subset == subset:
            assert grid[curves.k_values.index(p.k), curves.k_verif_values.index(p.k_verif)] == p.accuracy


def three_questions() -> ScoredPool:
    """q0: every candidate right (voting solves it); q1: one right of four, voting picks the
    wrong majority (ambiguous at k=4); q2: nothing right (hopeless)."""
    answers = np.array([[0, 0, 0, 0], [0, 1, 1, 1], [1, 1, 2, 2]], np.int32)
    answer_correct = np.zeros((3, 3), bool)
    answer_correct[:, 0] = True
    v = np.zeros((3, 4, 1), np.int8)
    from search.scored_pool import mean_verdict

    return ScoredPool(["q0", "q1", "q2"], answers == 0, answers, answer_correct, v,
                      np.zeros((3, 3, 3, 3), np.int32), mean_verdict(v))


@pytest.mark.parametrize("seeds", [1, 3])
def test_ambiguous_points_hold_the_draws_with_a_right_candidate_that_voting_gets_wrong(seeds):
    curves = compute_curves(three_questions(), CurvesConfig(seeds=seeds, bootstrap=20, k_values=[4],
                                                            strategies=["consistency"]))
    [amb] = [p for p in curves.points if p.subset == "ambiguous"]
    assert (amb.accuracy, amb.questions) == (0.0, 1)  # only q1, every draw, and the majority is wrong
    [everything] = [p for p in curves.points if p.subset == "all"]
    assert everything.accuracy == pytest.approx(1 / 3)  # q0 only


def test_no_ambiguous_question_gives_no_ambiguous_points():
    pool = three_questions()
    keep = [0, 2]  # solved and hopeless only
    pool = ScoredPool(["q0", "q2"], pool.correct[keep], pool.answer_ids[keep], pool.answer_correct[keep],
                      pool.verdicts[keep], pool.compare_counts[keep], pool.score[keep])
    curves = compute_curves(pool, CurvesConfig(seeds=2, bootstrap=20, strategies=["consistency"]))
    assert not [p for p in curves.points if p.subset == "ambiguous"]
    assert curves.summary()["curves_ambiguous"] == {}


def test_ambiguous_intervals_stay_finite_when_a_resample_misses_every_ambiguous_question():
    pool = three_questions()
    many = [0] * 29 + [1]  # 29 solved questions and one ambiguous: most resamples miss it
    pool = ScoredPool([f"q{i}" for i in range(30)], pool.correct[many], pool.answer_ids[many],
                      pool.answer_correct[many], pool.verdicts[many], pool.compare_counts[many], pool.score[many])
    curves = compute_curves(pool, CurvesConfig(seeds=2, bootstrap=200, k_values=[4], strategies=["consistency"]))
    [amb] = [p for p in curves.points if p.subset == "ambiguous"]
    assert np.isfinite([amb.ci_low, amb.ci_high]).all()


@pytest.mark.parametrize("kwargs", [{"seeds": 0}, {"bootstrap": 0}, {"confidence": 0.0}, {"confidence": 1.0},
                                    {"confidence": -0.5}, {"confidence": 1.5}])
def test_curves_config_refuses_what_no_interval_can_have(kwargs):
    with pytest.raises(ValueError, match="CurvesConfig"):
        CurvesConfig(**kwargs)


def test_curves_config_takes_a_single_resample_and_seed():
    cfg = CurvesConfig(seeds=1, bootstrap=1)
    assert (cfg.seeds, cfg.bootstrap) == (1, 1)


@pytest.mark.parametrize("field", ["k_values", "k_verif_values"])
def test_k_zero_is_refused(field):
    with pytest.raises(ValueError, match=r"\[0\] are outside"):
        compute_curves(synthetic_pool(5, 8, 4), CurvesConfig(seeds=1, bootstrap=10, **{field: [0]}))
