"""Straightforward per-question Python versions of the strategies: the oracle in tests and the
baseline the benchmark divides by. Written for obviousness, not speed: each subsample is drawn
with `random.sample`, each vote counted with a Counter.
"""

from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np

from search.scored_pool import ScoredPool
from search.strategies.base import EPS, StrategyOptions


def _score(verdicts: list[int]) -> float:
    """Share of 1 verdicts; an unparsable one counts as 0."""
    return sum(x == 1 for x in verdicts) / len(verdicts)


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


def verification(answers: list[int], verdicts: list[list[int]], classes_ok: list[bool], counts: np.ndarray,
                 k: int, k_verif: int, options: StrategyOptions, rng: random.Random, tie_break: bool) -> bool:
    """The rules of search.selection, spelled out one candidate at a time."""
    pick = rng.sample(range(len(answers)), k)
    drawn = {i: rng.sample(verdicts[i], k_verif) for i in pick}
    keep = [i for i in pick if answers[i] >= 0] or list(pick)  # no answer: never selected
    if options.preliminary:
        first = min(options.n_preliminary, k_verif)
        prelim = {i: _score(drawn[i][:first]) for i in keep}
        passed = [i for i in keep if prelim[i] >= options.preliminary_threshold - EPS]
        per: Counter = Counter()
        capped = []
        for i in sorted(passed, key=lambda i: (-prelim[i], pick.index(i))):
            if per[answers[i]] < options.max_per_answer:
                capped.append(i)
                per[answers[i]] += 1
        keep = capped or keep
    scores = {i: _score(drawn[i]) for i in keep}
    best = max(scores.values())
    top = [i for i in pick if i in scores and scores[i] >= best - options.top_margin - EPS]
    winner = min(keep, key=lambda i: (-scores[i], pick.index(i)))
    if tie_break and len({answers[i] for i in top}) > 1 and options.k_tie > 0:
        wins: Counter = Counter()
        for x, i in enumerate(top):
            for j in top[x + 1:]:
                if answers[i] == answers[j]:
                    continue
                for n in range(options.k_tie):
                    first, second = (i, j) if n % 2 == 0 else (j, i)
                    c = counts[answers[first], answers[second]].astype(float)
                    if c.sum() == 0:
                        c = counts[answers[second], answers[first]][[1, 0, 2]].astype(float)
                    p = c / c.sum() if c.sum() else np.array([0.5, 0.5, 0.0])
                    u = rng.random()
                    if u < p[0]:
                        wins[first] += 1
                    elif u < p[0] + p[1]:
                        wins[second] += 1
        winner = min(top, key=lambda i: (-wins[i], -scores[i], pick.index(i)))
    return answers[winner] >= 0 and classes_ok[answers[winner]]


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
        verdicts = pool.verdicts[q].tolist() if name.startswith("verification") else None
        hits = 0
        for _ in range(seeds):
            if name == "consistency":
                hits += consistency(answers, ok, k, rng)
            elif name == "best_of_n":
                hits += best_of_n(scores, correct, k, rng)
            elif name == "weighted_best_of_n":
                hits += weighted_best_of_n(answers, scores, ok, k, rng)
            else:
                hits += verification(answers, verdicts, ok, pool.compare_counts[q], k, k_verif, options, rng,
                                     tie_break=name == "verification_tie")
        out.append(hits / seeds)
    return np.array(out)
