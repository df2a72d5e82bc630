"""Statistics at their stated level: the scaling curves' bootstrap intervals, the paired t
intervals of the SOAR comparisons, and pass@k / Consistency@k against exact enumeration.

Checking that an interval brackets the mean and narrows with data passes for any level; these
compare widths with the normal and t quantiles and count coverage over many known datasets
(fixed seeds, so each run draws the same numbers).
"""

from __future__ import annotations

import itertools
import math
import statistics

import numpy as np
import pytest
from scipy import stats

from evolution.comparisons import paired_difference
from scaling.curves import CurvesConfig, bootstrap_ci, compute_curves, resample_counts
from search.scored_pool import ScoredPool, mean_verdict, synthetic_pool
from search.strategies import Draws, StrategyOptions, get_strategy, pass_at_k_estimate


def z(confidence: float) -> float:
    return statistics.NormalDist().inv_cdf(0.5 + confidence / 2)


# -- the bootstrap (scaling/curves.py) ------------------------------------------------------
N_BERNOULLI = 1600


@pytest.fixture(scope="module")
def many_resamples() -> np.ndarray:
    return resample_counts(N_BERNOULLI, 20000, np.random.default_rng(0))


@pytest.mark.parametrize("confidence", [0.8, 0.9, 0.95, 0.99])
def test_bootstrap_half_widths_are_the_normal_quantile_times_the_standard_error(confidence, many_resamples):
    # a Bernoulli vector with p = 0.3: the mean's bootstrap sd is sqrt(p(1-p)/n) and, with n this
    # large, each tail of the interval sits z(confidence) standard errors from the mean
    n, p = N_BERNOULLI, 0.3
    x = np.zeros((1, n))
    x[0, : int(p * n)] = 1
    se = math.sqrt(p * (1 - p) / n)
    lo, hi = bootstrap_ci(x, many_resamples, confidence)
    assert (p - lo[0]) / se == pytest.approx(z(confidence), rel=0.06)
    assert (hi[0] - p) / se == pytest.approx(z(confidence), rel=0.06)  # a 90% tail is 16% short


def test_a_95_interval_is_wider_than_a_90_one_on_the_same_resamples():
    rng = np.random.default_rng(3)
    x = (rng.random((5, 300)) < 0.4).astype(float)
    counts = resample_counts(300, 4000, rng)
    lo90, hi90 = bootstrap_ci(x, counts, 0.90)
    lo95, hi95 = bootstrap_ci(x, counts, 0.95)
    assert np.all(lo95 < lo90) and np.all(hi90 < hi95)
    assert np.all((hi95 - lo95) / (hi90 - lo90) == pytest.approx(z(0.95) / z(0.90), rel=0.1))


def test_bootstrap_intervals_cover_the_true_mean_at_their_level():
    # 1000 datasets of 400 Bernoulli(0.3) questions: a 95% interval misses 0.3 about 50 times, a
    # 90% one about 100 (binomial sd ~7 and ~9.5)
    rng = np.random.default_rng(1)
    data = (rng.random((1000, 400)) < 0.3).astype(float)
    counts = resample_counts(400, 2000, np.random.default_rng(2))
    for confidence, lowest, highest in ((0.95, 0.93, 0.97), (0.90, 0.875, 0.925)):
        lo, hi = bootstrap_ci(data, counts, confidence)
        coverage = float(((lo <= 0.3) & (0.3 <= hi)).mean())
        assert lowest <= coverage <= highest, (confidence, coverage)


def test_weighted_bootstrap_is_the_ratio_of_sums():
    # numerators 2x and weights 2: the same ratio as the plain mean, resample by resample
    rng = np.random.default_rng(4)
    x = (rng.random((1, 200)) < 0.5).astype(float)
    counts = resample_counts(200, 3000, rng)
    plain = bootstrap_ci(x, counts, 0.95)
    weighted = bootstrap_ci(2 * x, counts, 0.95, weights=np.full_like(x, 2.0))
    np.testing.assert_allclose(weighted, plain)


def test_curves_report_intervals_at_the_configured_confidence():
    pool = synthetic_pool(60, 8, 4, seed=5)
    wide = compute_curves(pool, CurvesConfig(strategies=["consistency"], k_values=[4], bootstrap=3000,
                                             confidence=0.99))
    narrow = compute_curves(pool, CurvesConfig(strategies=["consistency"], k_values=[4], bootstrap=3000,
                                               confidence=0.80))
    [w] = [p for p in wide.points if p.subset == "all"]
    [n] = [p for p in narrow.points if p.subset == "all"]
    assert w.accuracy == n.accuracy
    assert (w.ci_high - w.ci_low) / (n.ci_high - n.ci_low) == pytest.approx(z(0.99) / z(0.80), rel=0.15)


# -- the paired t interval (evolution/comparisons.py) ---------------------------------------------
@pytest.mark.parametrize("n", [*range(2, 40), 45, 100, 1000])
def test_paired_difference_half_width_is_t_975_times_the_standard_error(n):
    rng = np.random.default_rng(n)
    a, b = rng.normal(1.0, 2.0, n).tolist(), rng.normal(0.0, 1.0, n).tolist()
    d = paired_difference(a, b)
    se = statistics.stdev(d["diffs"]) / math.sqrt(n)
    half = (d["ci95"][1] - d["ci95"][0]) / 2
    t = stats.t.ppf(0.975, n - 1)
    assert half / se == pytest.approx(t, abs=1e-3)  # the table holds t to 3 decimals
    assert (d["ci95"][0] + d["ci95"][1]) / 2 == pytest.approx(d["mean"])


def test_t_975_beyond_its_table_is_within_1e_4_of_the_exact_quantile():
    """The Cornish-Fisher expansion past df = 30 holds what its docstring says; a slip in a
    second-order coefficient moves it by 1e-4 or more at df = 31."""
    from evolution.comparisons import t975

    worst = max(abs(t975(df) - stats.t.ppf(0.975, df)) for df in range(31, 2000))
    assert worst < 1e-4


def test_paired_t_intervals_cover_the_true_difference_95_percent_of_the_time():
    rng = np.random.default_rng(7)
    hits = 0
    trials = 4000
    for _ in range(trials):
        a = rng.normal(0.5, 1.0, 5)
        b = rng.normal(0.0, 1.0, 5)
        lo, hi = paired_difference(a.tolist(), b.tolist())["ci95"]
        hits += lo <= 0.5 <= hi
    assert 0.94 <= hits / trials <= 0.96  # binomial sd at 95%: 0.0034


# -- pass@k and Consistency@k against exact enumeration -------------------------------------------
def test_pass_at_k_is_the_share_of_k_subsets_holding_a_correct_candidate():
    for n in range(1, 8):
        for c in range(n + 1):
            correct = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(correct, k))
                want = sum(any(s) for s in subsets) / len(subsets)
                got = pass_at_k_estimate(np.array([n]), np.array([c]), k)[0]
                assert got == pytest.approx(want, abs=1e-12), (n, c, k)


def one_question_pools(answer_lists: list[list[int]], correct_class: int = 0) -> ScoredPool:
    """Questions with the given candidate answer classes (-1: no answer); class 0 is right."""
    answers = np.array(answer_lists, np.int32)
    q, n = answers.shape
    a = int(answers.max()) + 1
    answer_correct = np.zeros((q, a), bool)
    answer_correct[:, correct_class] = True
    correct = (answers == correct_class)
    v = np.zeros((q, n, 1), np.int8)
    return ScoredPool([f"q{i}" for i in range(q)], correct, answers, answer_correct, v,
                      np.zeros((q, a, a, 3), np.int32), mean_verdict(v))


def exact_majority(answers: list[int], k: int, right: int = 0) -> float:
    """Mean over every k-subset of P(the majority answer is right), ties split evenly."""
    total, subsets = 0.0, 0
    for subset in itertools.combinations(answers, k):
        votes = [x for x in subset if x >= 0]
        subsets += 1
        if not votes:
            continue
        counts = {x: votes.count(x) for x in set(votes)}
        top = max(counts.values())
        tied = [x for x, c in counts.items() if c == top]
        total += (right in tied) / len(tied)
    return total / subsets


ANSWERS = [[0, 0, 1, 1, 1, 2, -1], [0, 1, 2, 3, 0, -1, -1], [1, 1, 0, 2, 2, 0, 0]]


def test_pass_at_k_strategy_matches_enumeration_on_a_pool():
    pool = one_question_pools(ANSWERS)
    for k in range(1, 8):
        got = get_strategy("pass")(pool, Draws(pool, seeds=1), k=k, k_verif=None, options=StrategyOptions())
        for q, answers in enumerate(ANSWERS):
            subsets = list(itertools.combinations(answers, k))
            want = sum(0 in s for s in subsets) / len(subsets)
            assert got.per_question[q] == pytest.approx(want, abs=1e-12), (q, k)


def test_consistency_matches_exact_majority_vote_over_every_subset():
    pool = one_question_pools(ANSWERS)
    draws = Draws(pool, seeds=20000, seed=3)
    for k in range(1, 8):
        got = get_strategy("consistency")(pool, draws, k=k, k_verif=None, options=StrategyOptions())
        want = [exact_majority(a, k) for a in ANSWERS]
        # 20000 draws: the standard error of each mean is below 0.0036
        np.testing.assert_allclose(got.per_question, want, atol=0.015, err_msg=f"k={k}")
