"""pass@k: the oracle (is any of k candidates correct?), by the unbiased estimator."""

from __future__ import annotations

import numpy as np

from search.scored_pool import ScoredPool
from search.strategies.base import Draws, StrategyOptions, StrategyResult, check_k


def pass_at_k_estimate(n: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """1 - C(n-c, k) / C(n, k) per question, as 1 - prod(1 - k / arange(n-c+1, n+1)).

    The product form never builds a binomial coefficient, so it is stable for n in the
    thousands; n - c < k means every k-subset holds a correct candidate.
    """
    n, c = np.broadcast_arrays(np.asarray(n), np.asarray(c))
    out = np.ones(n.shape)
    for i in np.ndindex(n.shape):
        ni, ci = int(n[i]), int(c[i])
        if ni - ci >= k:
            out[i] = 1.0 - np.prod(1.0 - k / np.arange(ni - ci + 1, ni + 1))
    return out


def pass_at_k(pool: ScoredPool, draws: Draws, *, k: int, k_verif: int | None, options: StrategyOptions) -> StrategyResult:
    check_k(pool, k, None)
    q, n, _ = pool.shape
    acc = pass_at_k_estimate(np.full(q, n), pool.correct.sum(1), k)
    return StrategyResult("pass", k, None, acc, exact=True)
