"""Straightforward per-question Python versions of the strategies: the oracle in tests and the
baseline the benchmark divides by. Written for obviousness, not speed: each subsample is drawn
with `random.sample`, each vote counted with a Counter.
"""

from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np

from search.scaling.pool import ScoredPool
from search.scaling.strategies.base import EPS, StrategyOptions


def _mean(verdicts: list[int]) -> float:
    valid = [x for x in verdicts if x >= 0]
    return sum(valid) / len(valid) if valid else -1.0


def pass_at_k(correct: list[bool], k: int) -> float:
    n, c = len(correct), sum(correct)
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


def consistency(answers: list[int], classes_ok: list[bool], k: int, rng: random.Random) -> bool:
    pick = rng.sample(range(len(answers)), k)
    votes = Counter(answers[i] for i in pick if answers[i] >= 0)
    if not votes:
        return False
    top = max(votes.values())
    return classes_ok[rng.choice([a for a, c in votes.items() if c == top])]


def best_of_n(scores: list[float], correct: list[bool], k: int, rng: random.Random) -> bool:
    pick = rng.sample(range(len(scores)), k)
    best = max(scores[i] for i in pick)
    return correct[rng.choice([i for i in pick if scores[i] == best])]


def weighted_best_of_n(answers: list[int], scores: list[float], classes_ok: list[bool], k: int,
                       rng: random.Random) -> bool:
    pick = rng.sample(range(len(answers)), k)
    totals: dict[int, float] = {}
    for i in pick:
        if answers[i] >= 0:
            totals[answers[i]] = totals.get(answers[i], 0.0) + max(scores[i], 0.0)
    if not totals:
        return False
    top = max(totals.values())
    return classes_ok[rng.choice([a for a, t in totals.items() if t == top])]


def verification(answers: list[int], verdicts: list[list[int]], classes_ok: list[bool], compare: np.ndarray,
                 k: int, k_verif: int, options: StrategyOptions, rng: random.Random) -> bool:
    pick = rng.sample(range(len(answers)), k)
    drawn = {i: rng.sample(verdicts[i], k_verif) for i in pick}
    keep = list(pick)
    if options.preliminary:
        first = min(options.n_preliminary, k_verif)
        keep = [i for i in pick if _mean(drawn[i][:first]) >= options.preliminary_threshold - EPS]
        per: Counter = Counter()
        capped = []
        for i in keep:
            if per[answers[i]] < options.max_per_answer:
                capped.append(i)
                per[answers[i]] += 1
        keep = capped or list(pick)
    means = {i: _mean(drawn[i]) for i in keep}
    best = max(means.values())
    top = [i for i in keep if means[i] >= best - options.top_margin - EPS]
    groups = Counter(answers[i] for i in top)
    if len(groups) > 1:  # expected round-robin win rate against the other answers in the top group

        def beats(a: int, b: int) -> float:
            if a < 0:
                return 0.0
            return 1.0 if b < 0 else float(compare[a, b])

        def rate(a: int) -> tuple[float, int]:
            others = sum(c for b, c in groups.items() if b != a)
            return sum(c * beats(a, b) for b, c in groups.items() if b != a) / others, groups[a]

        best_key = max(rate(a) for a in groups)
        winner = rng.choice([a for a in groups if abs(rate(a)[0] - best_key[0]) < 1e-9 and rate(a)[1] == best_key[1]])
    else:
        (winner,) = groups
    return winner >= 0 and classes_ok[winner]


def curves_point(pool: ScoredPool, name: str, k: int, k_verif: int | None, seeds: int, options: StrategyOptions,
                 questions: range | None = None, seed: int = 0) -> np.ndarray:
    """Per-question accuracy of one strategy at one (k, k_verif), question by question."""
    rng = random.Random(seed)
    out = []
    for q in questions if questions is not None else range(pool.shape[0]):
        answers = pool.answer_ids[q].tolist()
        correct = pool.correct[q].tolist()
        ok = pool.answer_correct[q].tolist()
        if name == "pass":
            out.append(pass_at_k(correct, k))
            continue
        scores = pool.score[q].tolist()
        verdicts = pool.verdicts[q].tolist() if name == "verification" else None
        hits = 0
        for _ in range(seeds):
            if name == "consistency":
                hits += consistency(answers, ok, k, rng)
            elif name == "best_of_n":
                hits += best_of_n(scores, correct, k, rng)
            elif name == "weighted_best_of_n":
                hits += weighted_best_of_n(answers, scores, ok, k, rng)
            else:
                hits += verification(answers, verdicts, ok, pool.compare_win[q], k, k_verif, options, rng)
        out.append(hits / seeds)
    return np.array(out)
