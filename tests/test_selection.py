"""Verification@k selection (search/selection.py) on small hand-made arrays: the options' bounds,
scores, the preliminary round, the top group, the tie-break's plan and winner; and the offline
path's [seeds, questions, k] arrays select per question exactly what the live path's [k] do.
The strategies built on it: tests/test_strategies.py."""

from __future__ import annotations

import numpy as np
import pytest

from search.selection import (
    SelectionOptions,
    matchups,
    preliminary_keep,
    shortlist,
    tie_plan,
    tie_winner,
    top_per_answer,
    verdict_score,
)


def test_the_defaults_are_the_ones_the_curves_and_configs_assume():
    o = SelectionOptions()
    assert (o.top_margin, o.tie_break, o.k_tie, o.preliminary, o.n_preliminary, o.preliminary_threshold,
            o.max_per_answer, o.score) == (0.05, True, 4, False, 10, 0.2, 15, "verdicts")


@pytest.mark.parametrize("fields", [{"top_margin": 0.0}, {"top_margin": 0.99}, {"n_preliminary": 1}, {"max_per_answer": 1},
                                    {"k_tie": 0}, {"preliminary_threshold": 0.0}, {"preliminary_threshold": 1.0}])
def test_options_take_each_bound_they_allow(fields):
    SelectionOptions(**fields)


@pytest.mark.parametrize("fields, field", [
    ({"top_margin": 1.0}, "top_margin"), ({"top_margin": 1.5}, "top_margin"), ({"top_margin": -0.5}, "top_margin"),
    ({"n_preliminary": 0}, "n_preliminary"), ({"max_per_answer": 0}, "max_per_answer"),
    ({"n_preliminary": 0, "max_per_answer": 0}, "n_preliminary"), ({"k_tie": -1}, "k_tie"),
    ({"preliminary_threshold": -0.5}, "preliminary_threshold"), ({"preliminary_threshold": 1.5}, "preliminary_threshold")])
def test_options_outside_their_bounds_are_refused_naming_the_field(fields, field):
    with pytest.raises(ValueError, match=field):
        SelectionOptions(**fields)


def test_a_score_is_the_share_of_ones_among_the_verdicts_drawn():
    assert verdict_score(np.array([3, 0, 1, 1]), np.array([4, 0, 1, 2])).tolist() == [0.75, 0.0, 1.0, 0.5]
    assert verdict_score(np.array([0]), 0).tolist() == [0.0]  # nothing drawn: 0, not a division by zero


def test_top_per_answer_keeps_the_best_scored_members_of_each_answer_lower_index_first():
    ids = np.array([0, 0, 0, 1, 1, -1, 0])
    score = np.array([0.5, 0.9, 0.5, 0.1, 0.2, 0.7, 0.1])
    keep = np.array([True, True, True, True, True, True, False])
    assert top_per_answer(ids, keep, score, 2).tolist() == [True, True, False, True, True, True, False]
    assert top_per_answer(ids, keep, score, 1).tolist() == [False, True, False, False, True, True, False]
    # the answer that sorts first has several members too (its run starts at position 0)
    assert top_per_answer(np.array([0, 0, 1]), np.ones(3, bool), np.array([0.3, 0.6, 0.1]), 1).tolist() == [
        False, True, True]


def test_the_preliminary_round_keeps_scores_at_the_threshold_and_never_unanswered_ones():
    options = SelectionOptions(preliminary=True, preliminary_threshold=0.2, max_per_answer=15)
    ids = np.array([0, 1, -1, 2])
    prelim = verdict_score(np.array([2, 1, 9, 0]), np.array([10, 10, 10, 10]))  # 0.2 exactly, 0.1, 0.9, 0
    assert preliminary_keep(ids, prelim, options).tolist() == [True, False, False, False]
    # nobody passes: every answered candidate goes on
    assert preliminary_keep(ids, np.zeros(4), options).tolist() == [True, True, False, True]


def test_tie_plan_splits_a_matchups_comparisons_between_both_orders():
    assert [tie_plan(k) for k in (0, 1, 4, 5)] == [(0, 0), (1, 0), (2, 2), (3, 2)]
    assert all(type(x) is int for k in (4, 5) for x in tie_plan(k))


def test_the_tie_winner_has_the_most_wins_then_the_best_score_and_is_in_the_top_group():
    top = np.array([False, True, True])
    nobody_won = np.zeros((3, 3), int)
    assert int(tie_winner(top, nobody_won, np.array([0.0, 0.5, 0.6]))) == 2  # equal wins: the better score
    wins = np.array([[0, 9, 9], [0, 0, 2], [0, 1, 0]])  # 0 beat everyone but is not in the top group
    assert int(tie_winner(top, wins, np.array([0.9, 0.5, 0.6]))) == 1


def _question(rng: np.random.Generator, k: int = 6):
    ids = rng.integers(-1, 3, k)
    ones = rng.integers(0, 5, k)
    return ids, verdict_score(ones, 4), verdict_score(rng.integers(0, 5, k), 4), rng.integers(0, 3, (k, k))


@pytest.mark.parametrize("preliminary", [False, True])
def test_offline_arrays_select_per_question_what_the_live_path_selects(preliminary):
    rng = np.random.default_rng(0)
    qs = [[_question(rng) for _ in range(3)] for _ in range(2)]  # [seeds=2, questions=3]
    ids, score, prelim, wins = (np.array([[q[i] for q in row] for row in qs]) for i in range(4))
    options = SelectionOptions(preliminary=preliminary, max_per_answer=1, preliminary_threshold=0.3)
    top, first, split = shortlist(ids, score, options, prelim)
    pairs, winner = matchups(top, ids), tie_winner(top, wins, score)
    kept = top_per_answer(ids, np.ones_like(ids, bool), score, 1)
    for s in range(2):
        for q in range(3):
            i, sc, pr, w = qs[s][q]
            t, f, d = shortlist(i, sc, options, pr)
            assert (top[s, q].tolist(), int(first[s, q]), bool(split[s, q])) == (t.tolist(), int(f), bool(d))
            assert (pairs[s, q] == matchups(t, i)).all() and int(winner[s, q]) == int(tie_winner(t, w, sc))
            assert kept[s, q].tolist() == top_per_answer(i, np.ones_like(i, bool), sc, 1).tolist()
            assert (preliminary_keep(ids, prelim, options)[s, q] == preliminary_keep(i, pr, options)).all()
