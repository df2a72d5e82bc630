"""Strategies over a stored pool: exact forms, the vectorized subsampling against the
per-question reference, and the Verification@k rules on hand-built pools."""

from __future__ import annotations

import math

import numpy as np
import pytest

from search.scaling.pool import ScoredPool, mean_verdict, synthetic_pool
from search.scaling.strategies import STRATEGIES, Draws, StrategyOptions, get_strategy, pass_at_k_estimate
from search.scaling.strategies import reference as ref
from search.scaling.strategies.best_of_n import best_rank_weights
from search.scaling.strategies.verification import cap_per_class, verdict_means


def hand_pool(answers, correct_classes, verdicts, compare=None) -> ScoredPool:
    """One question: candidates with answer classes, per-candidate verdict lists."""
    answers = np.array([answers], np.int32)
    a = max(int(answers.max()) + 1, 1)
    answer_correct = np.zeros((1, a), bool)
    answer_correct[0, list(correct_classes)] = True
    correct = answer_correct[0][np.maximum(answers, 0)] & (answers >= 0)
    v = np.array([verdicts], np.int8)
    win = np.full((1, a, a), 0.5) if compare is None else np.array([compare], float)
    return ScoredPool(["q0"], correct, answers, answer_correct, v, win, mean_verdict(v))


def test_pass_at_k_estimator_matches_binomials():
    for n, c, k in [(10, 3, 1), (10, 3, 4), (200, 5, 50), (10, 0, 3), (10, 8, 3), (1000, 1, 999)]:
        want = 1.0 if n - c < k else 1 - math.comb(n - c, k) / math.comb(n, k)
        assert pass_at_k_estimate(np.array([n]), np.array([c]), k)[0] == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_best_rank_weights_are_the_probability_of_being_the_best():
    for n, k in [(8, 1), (8, 3), (8, 8), (50, 7)]:
        w = best_rank_weights(n, k)
        want = [math.comb(n - 1 - j, k - 1) / math.comb(n, k) if n - 1 - j >= k - 1 else 0 for j in range(n)]
        np.testing.assert_allclose(w, want, rtol=1e-9, atol=1e-15)
        assert w.sum() == pytest.approx(1.0)


def test_best_of_n_shares_correctness_among_tied_scores():
    # two candidates tie on the best score, one right one wrong: Best-of-2-of-2 is a coin flip
    pool = hand_pool([0, 1, 1], {0}, [[1, 1], [1, 1], [0, 0]])
    res = get_strategy("best_of_n")(pool, Draws(pool, seeds=1), k=3, k_verif=None, options=StrategyOptions())
    assert res.per_question[0] == pytest.approx(0.5)


@pytest.mark.parametrize("preliminary", [False, True])
@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_vectorized_matches_per_question_reference(name, preliminary):
    pool = synthetic_pool(40, 12, 8, seed=3, true_positive=0.6, false_positive=0.4)
    options = StrategyOptions(preliminary=preliminary, n_preliminary=3, max_per_answer=2)
    draws = Draws(pool, seeds=150, seed=1)
    for k in (1, 5, 12):
        fast = get_strategy(name)(pool, draws, k=k, k_verif=4, options=options).per_question.mean()
        slow = ref.curves_point(pool, name, k, 4, 150, options, seed=2).mean()
        # 40 questions x 150 draws: the standard error of each mean is below 0.006
        assert fast == pytest.approx(slow, abs=0.03), (name, k)


def test_consistency_picks_the_majority_answer():
    pool = hand_pool([0, 1, 1, 1, -1, -1], {1}, [[0]] * 6)
    res = get_strategy("consistency")(pool, Draws(pool, seeds=3), k=6, k_verif=None, options=StrategyOptions())
    assert res.per_question[0] == 1.0


def test_verification_prefers_the_better_verified_answer_over_the_majority():
    # three wrong candidates (class 1) that fail verification, one right one that passes
    pool = hand_pool([1, 1, 1, 0], {0}, [[0, 0, 1], [0, 0, 0], [0, 1, 0], [1, 1, 1]])
    d = Draws(pool, seeds=4)
    opts = StrategyOptions()
    assert get_strategy("verification")(pool, d, k=4, k_verif=3, options=opts).per_question[0] == 1.0
    assert get_strategy("consistency")(pool, d, k=4, k_verif=None, options=opts).per_question[0] == 0.0


def test_verification_breaks_top_group_ties_with_comparisons():
    # both answers verify perfectly; comparisons say class 1 beats class 0 (and it is the right one)
    compare = [[0.5, 0.2], [0.8, 0.5]]
    pool = hand_pool([0, 0, 1], {1}, [[1, 1]] * 3, compare)
    res = get_strategy("verification")(pool, Draws(pool, seeds=5), k=3, k_verif=2, options=StrategyOptions())
    assert res.per_question[0] == 1.0
    flipped = hand_pool([0, 0, 1], {1}, [[1, 1]] * 3, [[0.5, 0.8], [0.2, 0.5]])
    res = get_strategy("verification")(flipped, Draws(flipped, seeds=5), k=3, k_verif=2, options=StrategyOptions())
    assert res.per_question[0] == 0.0


def test_top_margin_decides_who_enters_the_top_group():
    # means 1.0 (wrong) and 0.96 (right); comparisons favour the right one
    verdicts = [[1] * 25, [1] * 24 + [0]]
    pool = hand_pool([0, 1], {1}, verdicts, [[0.5, 0.1], [0.9, 0.5]])
    acc = {m: get_strategy("verification")(pool, Draws(pool, seeds=2), k=2, k_verif=25,
                                           options=StrategyOptions(top_margin=m)).per_question[0] for m in (0.0, 0.05)}
    assert acc == {0.0: 0.0, 0.05: 1.0}


def test_unparsable_verdicts_are_left_out_of_the_mean():
    pool = hand_pool([0, 1], {0}, [[1, -1, -1], [1, 0, 0]])
    assert pool.score[0].tolist() == pytest.approx([1.0, 1 / 3])
    res = get_strategy("verification")(pool, Draws(pool, seeds=3), k=2, k_verif=3, options=StrategyOptions())
    assert res.per_question[0] == 1.0


def test_preliminary_round_marks_weak_candidates_and_keeps_all_verdicts_in_the_mean():
    pool = hand_pool([0, 1, 1], {0}, [[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 1, 0]])
    opts = StrategyOptions(preliminary=True, n_preliminary=2, preliminary_threshold=0.2)
    draws = Draws(pool, seeds=200)
    means, passed = verdict_means(pool, draws, 4, opts)
    assert passed[:, 0, 0].all() and not passed[:, 0, 1].any()
    assert 0 < passed[:, 0, 2].mean() < 1  # drawn (1, 0) pass, (0, 0) does not: 1/6 of the time
    assert passed[:, 0, 2].mean() == pytest.approx(5 / 6, abs=0.1)
    # the final mean covers all k_verif verdicts, preliminary ones included
    np.testing.assert_allclose(means[:, 0], np.broadcast_to([1.0, 0.0, 0.5], (200, 3)))


def test_cap_per_class_keeps_the_first_members_of_each_class():
    classes = np.array([[[2, 2, 1, 2, 1, 2, -1, -1]]])
    keep = np.array([[[True, False, True, True, True, True, True, True]]])
    got = cap_per_class(classes, keep, 2)
    assert got[0, 0].tolist() == [True, False, True, True, True, False, True, True]


def test_unknown_strategy_lists_the_known_ones():
    with pytest.raises(ValueError, match="consistency"):
        get_strategy("magic")


def test_k_out_of_range_names_the_limit():
    pool = synthetic_pool(3, 4, 2)
    with pytest.raises(ValueError, match="4 candidates"):
        get_strategy("consistency")(pool, Draws(pool, seeds=1), k=5, k_verif=None, options=StrategyOptions())
