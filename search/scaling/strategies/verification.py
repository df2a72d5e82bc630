"""Verification@k over a stored pool: the shared selection code (search.scaling.selection)
run on random subsamples, with the tie-break's comparisons replayed from the stored ones.

Two registered strategies: "verification" leaves the tie-break out (the paper's scaling
figures), "verification_tie" settles a disagreeing top group with k_tie comparisons per
matchup, each a draw (with replacement) from the stored comparisons of that ordered pair of
answers, so a stored win rate of 0.6 wins a 1-comparison matchup 60% of the time, not always.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from search.scaling.pool import ScoredPool
from search.scaling.selection import SelectionOptions, matchups, shortlist, tie_plan, tie_winner, verdict_score
from search.scaling.strategies.base import Draws, StrategyResult, check_k, draw_verdicts


def verdict_scores(pool: ScoredPool, draws: Draws, k_verif: int, options: SelectionOptions
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(score [S, Q, N] from k_verif drawn verdicts, preliminary score [S, Q, N] from the first few)."""
    ones, zeros, bad = (np.broadcast_to(c, (draws.seeds, *c.shape)) for c in pool.verdict_counts())
    first = min(options.n_preliminary, k_verif) if options.preliminary else k_verif
    p1, p0, pb = draw_verdicts(draws.rng, ones, zeros, bad, first)
    r1, _, _ = draw_verdicts(draws.rng, ones - p1, zeros - p0, bad - pb, k_verif - first)
    return verdict_score(p1 + r1, k_verif), verdict_score(p1, first)


def outcome_probs(counts: np.ndarray, a: int, b: int) -> np.ndarray:
    """P(first won, second won, unparsable) when a's response is shown before b's, from stored ones.

    No stored comparison in that order: the other order's, mirrored; none at all: a fair coin.
    """
    c = counts[a, b].astype(float)
    if c.sum() == 0:
        c = counts[b, a][[1, 0, 2]].astype(float)
    return c / c.sum() if c.sum() else np.array([0.5, 0.5, 0.0])


def replay_wins(rng: np.random.Generator, counts: np.ndarray, classes: np.ndarray, top: np.ndarray,
                k_tie: int) -> np.ndarray:
    """wins [k, k] of one question's top group after k_tie replayed comparisons per matchup."""
    wins = np.zeros((len(classes), len(classes)), np.int64)
    forward, backward = tie_plan(k_tie)
    for i, j in matchups(top, classes):
        a, b = classes[i], classes[j]
        f = rng.multinomial(forward, outcome_probs(counts, a, b))
        r = rng.multinomial(backward, outcome_probs(counts, b, a))
        wins[i, j] += f[0] + r[1]
        wins[j, i] += f[1] + r[0]
    return wins


def select(pool: ScoredPool, draws: Draws, k: int, k_verif: int, options: SelectionOptions) -> np.ndarray:
    """Index (into each k-subsample) of the selected candidate, [S, Q]."""
    score, prelim = draws.cached(("verification", k_verif, options.preliminary, options.n_preliminary),
                                 lambda: verdict_scores(pool, draws, k_verif, options))
    m, classes = draws.take(score, k), draws.take_answers(k)
    top, chosen, disagree = shortlist(classes, m, options, draws.take(prelim, k) if options.preliminary else None)
    if options.tie_break and options.k_tie > 0:
        for s, q in zip(*np.nonzero(disagree), strict=True):
            wins = replay_wins(draws.rng, pool.compare_counts[q], classes[s, q], top[s, q], options.k_tie)
            chosen[s, q] = tie_winner(top[s, q], wins, m[s, q])
    return chosen


def _verification(pool: ScoredPool, draws: Draws, k: int, k_verif: int | None, options: SelectionOptions,
                  name: str) -> StrategyResult:
    if k_verif is None:
        raise ValueError(f"{name} needs k_verif (verdicts per candidate)")
    check_k(pool, k, k_verif)
    chosen = select(pool, draws, k, k_verif, options)
    ok = np.take_along_axis(draws.take(pool.correct, k), chosen[..., None], -1)[..., 0]
    return StrategyResult(name, k, k_verif, ok.mean(0), exact=False, per_draw=ok)


def verification(pool: ScoredPool, draws: Draws, *, k: int, k_verif: int | None,
                 options: SelectionOptions) -> StrategyResult:
    """Verification@k without the tie-break: the best-scored eligible candidate."""
    return _verification(pool, draws, k, k_verif, replace(options, tie_break=False), "verification")


def verification_tie(pool: ScoredPool, draws: Draws, *, k: int, k_verif: int | None,
                     options: SelectionOptions) -> StrategyResult:
    """Verification@k with the pairwise tie-break of a disagreeing top group."""
    return _verification(pool, draws, k, k_verif, replace(options, tie_break=True), "verification_tie")
