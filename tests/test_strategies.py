"""Strategies over a stored pool: exact forms, the vectorized subsampling against the
per-question reference, and the Verification@k rules on hand-built pools."""

from __future__ import annotations

import math

import numpy as np
import pytest

from search.scored_pool import ScoredPool, mean_verdict, synthetic_pool
from search.selection import top_per_answer
from search.strategies import (
    STRATEGIES,
    Draws,
    StrategyOptions,
    get_strategy,
    pass_at_k_estimate,
)
from search.strategies import reference as ref
from search.strategies.best_of_n import best_rank_weights


def hand_pool(answers, correct_classes, verdicts, compare=None) -> ScoredPool:
    """One question: candidates with answer classes, per-candidate verdict lists, and stored
    comparisons {(class shown first, class second): [first won, second won, unparsable]}."""
    answers = np.array([answers], np.int32)
    a = max(int(answers.max()) + 1, 1)
    answer_correct = np.zeros((1, a), bool)
    answer_correct[0, list(correct_classes)] = True
    correct = answer_correct[0][np.maximum(answers, 0)] & (answers >= 0)
    v = np.array([verdicts], np.int8)
    counts = np.zeros((1, a, a, 3), np.int32)
    for (x, y), c in (compare or {}).items():
        counts[0, x, y] = c
    return ScoredPool(["q0"], correct, answers, answer_correct, v, counts, mean_verdict(v))


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
    options = StrategyOptions(preliminary=preliminary, n_preliminary=3, max_per_answer=2, k_tie=3)
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


def run(name, pool, k, k_verif, seeds=5, **options):
    return get_strategy(name)(pool, Draws(pool, seeds=seeds), k=k, k_verif=k_verif,
                              options=StrategyOptions(**options)).per_question[0]


def test_verification_breaks_top_group_ties_with_comparisons():
    # both answers verify perfectly; comparisons always say class 1 (the right one) wins
    compare = {(1, 0): [5, 0, 0], (0, 1): [0, 5, 0]}
    pool = hand_pool([0, 0, 1], {1}, [[1, 1]] * 3, compare)
    assert run("verification_tie", pool, 3, 2) == 1.0
    flipped = hand_pool([0, 0, 1], {1}, [[1, 1]] * 3, {(1, 0): [0, 5, 0], (0, 1): [5, 0, 0]})
    assert run("verification_tie", flipped, 3, 2) == 0.0


@pytest.mark.parametrize("k_tie, want", [(1, 0.6), (3, 0.6**3 + 3 * 0.6**2 * 0.4)])
def test_tie_break_replays_draws_from_the_stored_comparisons(k_tie, want):
    # the right answer (1) won 3 of 5 stored comparisons in each order: a real tie-break with
    # k_tie comparisons wins as often as a binomial says, not always (the old expected-rate bug)
    compare = {(1, 0): [3, 2, 0], (0, 1): [2, 3, 0]}
    pool = hand_pool([0, 1], {1}, [[1, 1]] * 2, compare)
    assert run("verification_tie", pool, 2, 2, seeds=4000, k_tie=k_tie) == pytest.approx(want, abs=0.03)
    # the replay draws from the ordered pair: a rate of 0.45 still wins 45% of 1-comparison matchups
    low = hand_pool([0, 1], {1}, [[1, 1]] * 2, {(1, 0): [9, 11, 0], (0, 1): [11, 9, 0]})
    assert run("verification_tie", low, 2, 2, seeds=4000, k_tie=1) == pytest.approx(0.45, abs=0.03)


def test_answerless_candidates_are_never_selected_nor_change_the_tie_break():
    # two answerless candidates verify best: they are not selectable while an answer exists
    pool = hand_pool([-1, -1, 0, 1], {0}, [[1, 1, 1]] * 2 + [[1, 1, 0], [0, 0, 1]])
    assert run("verification", pool, 4, 3) == 1.0
    assert run("verification_tie", pool, 4, 3) == 1.0
    # A beats B, B beats C, C and A are even: answerless members in the top group must not
    # move the winner (they used to count as automatic losses in everyone's win rate)
    compare = {(0, 1): [4, 0, 0], (1, 0): [0, 4, 0], (1, 2): [4, 0, 0], (2, 1): [0, 4, 0],
               (0, 2): [2, 2, 0], (2, 0): [2, 2, 0]}
    a = hand_pool([0, 1, 2], {0}, [[1, 1]] * 3, compare)
    b = hand_pool([0, 1, 2, -1, -1], {0}, [[1, 1]] * 5, compare)
    with_none = run("verification_tie", b, 5, 2, seeds=2000, k_tie=4)
    assert run("verification_tie", a, 3, 2, seeds=2000, k_tie=4) == pytest.approx(with_none, abs=0.05)


def test_top_margin_decides_who_enters_the_top_group():
    # scores 1.0 (wrong) and 0.96 (right); comparisons favour the right one
    verdicts = [[1] * 25, [1] * 24 + [0]]
    pool = hand_pool([0, 1], {1}, verdicts, {(1, 0): [5, 0, 0], (0, 1): [0, 5, 0]})
    acc = {m: run("verification_tie", pool, 2, 25, seeds=2, top_margin=m) for m in (0.0, 0.05)}
    assert acc == {0.0: 0.0, 0.05: 1.0}
    assert run("verification", pool, 2, 25, seeds=2, top_margin=0.05) == 0.0  # no tie-break: best score


def test_unparsable_verdicts_count_as_zero():
    # the wrong one has a single parsable verdict (a 1): left out of the mean it scored 1.0
    pool = hand_pool([0, 1], {1}, [[1, -1, -1, -1], [1, 1, 1, 0]])
    assert pool.score[0].tolist() == pytest.approx([0.25, 0.75])
    assert run("verification", pool, 2, 4) == 1.0
    assert pool.unparsable_rates()["verdicts"] == pytest.approx(3 / 8)


def test_preliminary_round_keeps_the_best_scored_per_answer():
    # class 0 (right) has a weak and a strong member, class 1 one in between; with one kept
    # per answer, keeping the first-drawn member of class 0 lost half the time
    verdicts = [[1, 0, 1, 0], [1, 1, 1, 1], [1, 1, 1, 0]]
    pool = hand_pool([0, 0, 1], {0}, verdicts)
    opts = dict(preliminary=True, n_preliminary=4, max_per_answer=1, preliminary_threshold=0.2)
    assert run("verification", pool, 3, 4, seeds=50, **opts) == 1.0


def test_preliminary_round_with_no_survivor_falls_back_to_everyone():
    pool = hand_pool([0, 1], {0}, [[1, 0, 0, 0], [0, 0, 0, 0]])
    opts = dict(preliminary=True, n_preliminary=4, preliminary_threshold=0.5)
    assert run("verification", pool, 2, 4, **opts) == 1.0


def test_top_per_answer_keeps_the_best_scored_members_of_each_class():
    classes = np.array([[2, 2, 1, 2, 1, 2, -1, -1]])
    keep = np.array([[True, False, True, True, True, True, True, True]])
    score = np.array([[0.1, 0.9, 0.2, 0.5, 0.3, 0.5, 0.0, 0.0]])
    got = top_per_answer(classes, keep, score, 2)
    assert got[0].tolist() == [False, False, True, True, True, True, True, True]


def test_unknown_strategy_lists_the_known_ones():
    with pytest.raises(ValueError, match="consistency"):
        get_strategy("magic")


def test_k_out_of_range_names_the_limit():
    pool = synthetic_pool(3, 4, 2)
    with pytest.raises(ValueError, match="4 candidates"):
        get_strategy("consistency")(pool, Draws(pool, seeds=1), k=5, k_verif=None, options=StrategyOptions())


# -- edges found by `make mutate MODULES=verification` (docs/testing.md, issue 46) -----------------

def test_outcome_tables_use_the_order_shown_else_its_mirror_else_a_fair_coin():
    from search.strategies.verification import outcome_table

    counts = np.zeros((2, 3, 3, 3), np.int64)
    counts[0, 0, 1] = [2, 1, 1]  # a shown first: won 2, lost 1, 1 unparsable; never shown the other way
    counts[0, 1, 2] = [0, 1, 0]  # one comparison only, and its mirror stored too
    counts[0, 2, 1] = [3, 0, 1]
    counts[1, 2, 0] = [0, 0, 2]  # question 1: only unparsable ones
    t = outcome_table(counts)
    assert t[0, 0, 1].tolist() == [0.5, 0.25, 0.25]
    assert t[0, 1, 0].tolist() == [0.25, 0.5, 0.25]  # mirrored: b first wins what a-first lost
    assert t[0, 1, 2].tolist() == [0.0, 1.0, 0.0] and t[0, 2, 1].tolist() == [0.75, 0.0, 0.25]  # own order first
    assert t[0, 0, 2].tolist() == t[0, 2, 0].tolist() == [0.5, 0.5, 0.0]  # never compared: a coin
    assert t[1, 2, 0].tolist() == [0.0, 0.0, 1.0] and t[1, 0, 2].tolist() == [0.0, 0.0, 1.0]
    assert t[1, 0, 1].tolist() == [0.5, 0.5, 0.0]  # question 0's comparisons are not question 1's


def test_a_replayed_tie_break_credits_wins_to_the_right_side_and_unparsable_ones_to_nobody():
    from search.strategies.verification import replay_tie_break

    table = np.zeros((1, 2, 2, 3))
    table[0, 0, 1] = [1, 0, 0]  # answer 0 shown first: it wins
    table[0, 1, 0] = [0, 1, 0]  # answer 1 shown first: the second (answer 0) wins
    args = (np.array([0]), np.array([[0, 1]]), np.array([[True, True]]), np.array([[0.1, 0.9]]))
    assert replay_tie_break(np.random.default_rng(0), table, *args, 5).tolist() == [0]  # all 5 wins, lower score
    table[0, 0, 1] = table[0, 1, 0] = [0, 0, 1]  # every comparison unparsable: the better score decides
    assert replay_tie_break(np.random.default_rng(0), table, *args, 5).tolist() == [1]


def test_drawing_every_verdict_scores_each_candidate_by_all_of_them_with_or_without_a_preliminary_round():
    from search.selection import SelectionOptions
    from search.strategies.verification import verdict_scores

    pool = hand_pool([0, 1, 2], [0], [[1, 1, 0, -1, 1], [0, 0, 1, -1, -1], [1, 1, 1, 1, 0]])
    for preliminary in (False, True):
        draws = Draws(pool, seeds=20, seed=3)
        options = SelectionOptions(preliminary=preliminary, n_preliminary=2)
        score, prelim = verdict_scores(pool, draws, 5, options)
        assert score.shape == prelim.shape == (20, 1, 3)
        assert np.allclose(score, [0.6, 0.2, 0.8])  # ones / verdicts: every verdict drawn once
        if preliminary:  # from the first 2 drawn: halves, and not all equal to the full score
            assert set(np.unique(prelim * 2)) <= {0.0, 1.0, 2.0} and not np.allclose(prelim, score)


def test_probability_scores_are_mean_probabilities_and_refused_without_them():
    from search.selection import SelectionOptions
    from search.strategies.verification import verdict_scores

    pool = hand_pool([0, 1], [0], [[1, 0, 1], [0, 0, 1]])
    with pytest.raises(ValueError, match="needs every verdict's probability"):
        verdict_scores(pool, Draws(pool, seeds=2), 3, SelectionOptions(score="probability"))
    pool.verdict_probs = np.array([[[0.9, 0.3, 0.6], [0.1, 0.2, 0.6]]], np.float32)
    score, prelim = verdict_scores(pool, Draws(pool, seeds=4, seed=1), 3,
                                   SelectionOptions(score="probability", n_preliminary=1))
    assert score.shape == prelim.shape == (4, 1, 2) and np.allclose(score, [0.6, 0.3])
    # the first of the drawn verdicts: one of the candidate's own probabilities
    assert (np.abs(prelim[..., None] - pool.verdict_probs[None]).min(-1) < 1e-6).all()
    # fewer verdicts than stored: a random subset per draw, each of the candidate's probabilities in turn
    one, _ = verdict_scores(pool, Draws(pool, seeds=40, seed=2), 1, SelectionOptions(score="probability"))
    assert set(np.round(one[:, 0, 0].astype(float), 3)) == {0.9, 0.3, 0.6}


def test_the_hypergeometric_draw_is_random_wherever_the_population_is_mixed():
    """One good item of two, one drawn: good half the time (an entry wrongly treated as degenerate
    would always give 0); drawing nothing gives nothing, whatever the population."""
    from search.strategies.base import hypergeometric

    rng = np.random.default_rng(0)
    ones = np.ones(4000, np.int64)
    assert hypergeometric(rng, ones, ones, ones).mean() == pytest.approx(0.5, abs=0.05)
    assert hypergeometric(rng, ones, 3 * ones, 2 * ones).mean() == pytest.approx(0.5, abs=0.05)
    assert (hypergeometric(rng, 3 * ones[:5], 2 * ones[:5], 0 * ones[:5]) == 0).all()
    assert (hypergeometric(rng, 3 * ones[:5], 2 * ones[:5], 5 * ones[:5]) == 3).all()  # everything drawn


def test_the_vote_tie_break_never_overturns_a_real_margin():
    from search.strategies.base import vote

    classes = np.tile(np.array([0, 1, 1]), (200, 1, 1))  # [seeds, 1 question, k]
    weights = np.tile(np.array([0.6, 0.1, 0.1]), (200, 1, 1))  # class 0: 0.6 against 0.2
    chosen, cast = vote(classes, weights, 2, np.random.default_rng(0))
    assert (chosen == 0).all() and cast.all()
    tied, _ = vote(classes, np.tile(np.array([0.4, 0.2, 0.2]), (200, 1, 1)), 2, np.random.default_rng(0))
    assert 0 < tied.mean() < 1  # an exact tie goes either way


def test_draws_and_k_bounds_are_checked():
    from search.strategies.base import check_k

    pool = synthetic_pool(questions=2, candidates=4, verdicts=3, seed=0)
    with pytest.raises(ValueError, match="seeds=0"):
        Draws(pool, seeds=0)
    for k, k_verif in ((0, None), (5, None), (2, 0), (2, 4)):
        with pytest.raises(ValueError, match="out of range"):
            check_k(pool, k, k_verif)
    check_k(pool, 1, 1)
    check_k(pool, 4, 3)
