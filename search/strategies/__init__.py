"""Selection strategies over a stored pool, picked by name from one explicit registry.

    from search.strategies import Draws, StrategyOptions, get_strategy
    draws = Draws(pool, seeds=20)
    res = get_strategy("verification")(pool, draws, k=64, k_verif=16, options=StrategyOptions())
    res.per_question.mean()   # Verification@64 accuracy with 16 verdicts per candidate
"""

from __future__ import annotations

from collections.abc import Callable

from search.strategies.base import Draws, StrategyOptions, StrategyResult
from search.strategies.best_of_n import best_of_n
from search.strategies.consistency import consistency
from search.strategies.pass_at_k import pass_at_k, pass_at_k_estimate
from search.strategies.verification import verification, verification_tie
from search.strategies.weighted_best_of_n import weighted_best_of_n

Strategy = Callable[..., StrategyResult]

STRATEGIES: dict[str, Strategy] = {
    "pass": pass_at_k,  # oracle: any of k correct (unbiased estimator)
    "consistency": consistency,  # majority over normalized final answers
    "best_of_n": best_of_n,  # highest scalar score (exact form)
    "weighted_best_of_n": weighted_best_of_n,  # answer with the largest summed score
    "verification": verification,  # best self-verification score (the paper's scaling figures)
    "verification_tie": verification_tie,  # ... with the pairwise tie-break of a disagreeing top group
}
# Strategies whose accuracy depends on k_verif (the curves grid them over it).
USES_VERDICTS = frozenset({"verification", "verification_tie"})


def get_strategy(name: str) -> Strategy:
    if name not in STRATEGIES:
        raise ValueError(f"strategy {name!r} is unknown; choose one of {sorted(STRATEGIES)}")
    return STRATEGIES[name]


__all__ = ["STRATEGIES", "USES_VERDICTS", "Draws", "StrategyOptions", "StrategyResult", "get_strategy",
           "pass_at_k_estimate"]
