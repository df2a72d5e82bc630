"""Verification@k over a stored pool: the shared selection code (search.selection)
run on random subsamples, with the tie-break's comparisons replayed from the stored ones.

Two registered strategies: "verification" leaves the tie-break out (the paper's scaling
figures), "verification_tie" settles a disagreeing top group with k_tie comparisons per
matchup, each a draw (with replacement) from the stored comparisons of that ordered pair of
answers, so a stored win rate of 0.6 wins a 1-comparison matchup 60% of the time, not always.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from search.scored_pool import ScoredPool
from search.selection import (
    SelectionOptions,
    matchups,
    shortlist,
    tie_plan,
    tie_winner,
    verdict_score,
)
from search.strategies.base import Draws, StrategyResult, check_k, draw_verdicts


def probability_scores(pool: ScoredPool, draws: Draws, k_verif: int, first: int) -> tuple[np.ndarray, np.ndarray]:
    """(mean probability of k_verif verdicts drawn without replacement, of the first `first` of them),
    each [S, Q, N]."""
    if not pool.has_probs:
        pool.scores("probability")  # raises, saying how to sample probabilities
    s, (q, n, v) = draws.seeds, pool.shape
    pick = np.argsort(draws.rng.random((s, q, n, v)), axis=-1)[..., :k_verif]
    drawn = np.take_along_axis(np.broadcast_to(pool.verdict_probs, (s, q, n, v)), pick, -1)
    return drawn.mean(-1), drawn[..., :first].mean(-1)


def verdict_scores(pool: ScoredPool, draws: Draws, k_verif: int, options: SelectionOptions
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(score [S, Q, N] from k_verif drawn verdicts, preliminary score [S, Q, N] from the first few)."""
    if options.score == "probability":
        return probability_scores(pool, draws, k_verif, min(options.n_preliminary, k_verif))
    ones, zeros, bad = (np.broadcast_to(c, (draws.seeds, *c.shape)) for c in pool.verdict_counts())
    first = min(options.n_preliminary, k_verif) if options.preliminary else k_verif
    p1, p0, pb = draw_verdicts(draws.rng, ones, zeros, bad, first)
    r1, _, _ = draw_verdicts(draws.rng, ones - p1, zeros - p0, bad - pb, k_verif - first)
    return verdict_score(p1 + r1, k_verif), verdict_score(p1, first)


def outcome_table(counts: np.ndarray) -> np.ndarray:
    """[Q, A, A, 3] P(first won, second won, unparsable) when a's response is shown before b's.

    From the stored comparisons in that order; none: the other order's, mirrored; none at
    all: a fair coin.
    """
    here = counts.astype(float)
    mirrored = np.swapaxes(counts, 1, 2)[..., [1, 0, 2]].astype(float)
    use = np.where(here.sum(-1, keepdims=True) > 0, here, mirrored)
    total = use.sum(-1, keepdims=True)
    coin = np.broadcast_to(np.array([0.5, 0.5, 0.0]), use.shape)
    return np.where(total > 0, use / np.maximum(total, 1), coin)


# Candidate pairs per replay chunk: bounds the [cases, k, k] arrays at large k.
CHUNK_PAIRS = 1 << 22


def replay_tie_break(rng: np.random.Generator, table: np.ndarray, qs: np.ndarray, classes: np.ndarray,
                     top: np.ndarray, score: np.ndarray, k_tie: int) -> np.ndarray:
    """Winners [D] of D disagreeing top groups after k_tie replayed comparisons per matchup.

    qs [D] question of each case; classes, top, score [D, k]. Each comparison is a draw (with
    replacement) from the stored outcomes of that ordered pair of answers.
    """
    forward, backward = tie_plan(k_tie)
    d, k = classes.shape
    out = np.empty(d, np.int64)
    step = max(1, CHUNK_PAIRS // (k * k))
    for lo in range(0, d, step):
        sl = slice(lo, lo + step)
        pairs = matchups(top[sl], classes[sl])  # [c, k, k]
        c, i, j = np.nonzero(pairs)
        q, a, b = qs[sl][c], classes[sl][c, i], classes[sl][c, j]
        f = rng.multinomial(forward, table[q, a, b])  # i shown first
        r = rng.multinomial(backward, table[q, b, a])  # j shown first
        wins = np.zeros(pairs.shape, np.int64)
        np.add.at(wins, (c, i, j), f[:, 0] + r[:, 1])
        np.add.at(wins, (c, j, i), f[:, 1] + r[:, 0])
        out[sl] = tie_winner(top[sl], wins, score[sl])
    return out


def select(pool: ScoredPool, draws: Draws, k: int, k_verif: int, options: SelectionOptions) -> np.ndarray:
    """Index (into each k-subsample) of the selected candidate, [S, Q]."""
    score, prelim = draws.cached(("verification", k_verif, options.preliminary, options.n_preliminary, options.score),
                                 lambda: verdict_scores(pool, draws, k_verif, options))
    m, classes = draws.take(score, k), draws.take_answers(k)
    top, chosen, disagree = shortlist(classes, m, options, draws.take(prelim, k) if options.preliminary else None)
    if options.tie_break and options.k_tie > 0 and disagree.any():
        s, q = np.nonzero(disagree)
        table = draws.cached_table(lambda: outcome_table(pool.compare_counts))
        chosen[s, q] = replay_tie_break(draws.rng, table, q, classes[s, q], top[s, q], m[s, q], options.k_tie)
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
