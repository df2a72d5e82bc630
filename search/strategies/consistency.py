"""Consistency@k: majority vote over the normalized final answers of k candidates."""

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


def consistency(pool: ScoredPool, draws: Draws, *, k: int, k_verif: int | None, options: StrategyOptions) -> StrategyResult:
    check_k(pool, k, None)
    classes = draws.take_answers(k)
    chosen, cast = vote(classes, np.ones(classes.shape), pool.answer_correct.shape[1], draws.rng)
    ok = class_correct(pool, chosen, cast)
    return StrategyResult("consistency", k, None, ok.mean(0), exact=False, per_draw=ok)
