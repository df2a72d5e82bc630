"""Best-of-N: the single candidate with the highest scalar score among k (exact form).

The best of a uniform k-subset is the candidate of rank j (0 = highest of n) with
probability C(n-1-j, k-1) / C(n, k): no subsampling needed. Tied scores share their
correctness (a tie is broken uniformly at random).
"""

from __future__ import annotations

import numpy as np

from search.scored_pool import ScoredPool
from search.strategies.base import Draws, StrategyOptions, StrategyResult, check_k


def best_rank_weights(n: int, k: int) -> np.ndarray:
    """P(rank j is the best of a uniform k-subset of n), j = 0..n-1, by a stable recurrence.

    w_0 = k/n and w_{j+1} = w_j * (n-1-j-(k-1)) / (n-1-j): ratios of consecutive binomials.
    """
    w = np.zeros(n)
    w[0] = k / n
    for j in range(n - k):
        w[j + 1] = w[j] * (n - j - k) / (n - 1 - j)
    return w


def tie_averaged(sorted_scores: np.ndarray, sorted_values: np.ndarray) -> np.ndarray:
    """Replace each value by the mean over its run of equal scores (rows sorted by score)."""
    out = np.empty_like(sorted_values, dtype=float)
    for i in range(sorted_scores.shape[0]):
        _, start, counts = np.unique(-sorted_scores[i], return_index=True, return_counts=True)
        means = np.add.reduceat(sorted_values[i].astype(float), start) / counts
        out[i] = np.repeat(means, counts)
    return out


def best_of_n(pool: ScoredPool, draws: Draws, *, k: int, k_verif: int | None, options: StrategyOptions) -> StrategyResult:
    check_k(pool, k, None)
    _, n, _ = pool.shape
    idx = np.argsort(-pool.score, axis=1, kind="stable")
    scores = np.take_along_axis(pool.score, idx, 1)
    correct = tie_averaged(scores, np.take_along_axis(pool.correct, idx, 1))
    acc = correct @ best_rank_weights(n, k)
    return StrategyResult("best_of_n", k, None, acc, exact=True)
