"""Weighted Best-of-N: the answer whose k candidates have the largest summed score."""

from __future__ import annotations

import numpy as np

from search.scored_pool import ScoredPool
from search.strategies.base import (
    Draws,
    StrategyOptions,
    StrategyResult,
    check_k,
    class_correct,
    vote,
)


def weighted_best_of_n(pool: ScoredPool, draws: Draws, *, k: int, k_verif: int | None,
                       options: StrategyOptions) -> StrategyResult:
    check_k(pool, k, None)
    classes = draws.take_answers(k)
    weights = np.maximum(draws.take(pool.score, k), 0.0)  # an unscored candidate (-1) adds nothing
    chosen, cast = vote(classes, weights, pool.answer_correct.shape[1], draws.rng)
    ok = class_correct(pool, chosen, cast)
    return StrategyResult("weighted_best_of_n", k, None, ok.mean(0), exact=False, per_draw=ok)
