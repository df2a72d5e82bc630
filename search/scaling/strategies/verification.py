"""Verification@k: self-verification scores pick the answer; pairwise comparisons break ties.

Per (seed, question): draw k candidates and k_verif verdicts per candidate without
replacement; the top group is every candidate within `top_margin` of the best mean verdict;
if the top group agrees on the final answer that answer wins, otherwise a round-robin of
pairwise comparisons among the top group picks the winner.

On a stored pool the round-robin is taken in expectation: a member answering a beats a
member answering b with the stored comparison rate P[a, b], and the answer whose members
have the highest expected win rate against the rest of the top group wins (ties: the larger
share of the top group). That needs comparisons only between answer classes, not between
every pair of candidates each subsample could bring together. A response with no final
answer loses every comparison.

With `options.preliminary`, min(n_preliminary, k_verif) verdicts come first; candidates
whose preliminary mean is below the threshold are dropped and at most `max_per_answer`
survivors per distinct answer are kept (in random order) before the remaining verdicts.
"""

from __future__ import annotations

import numpy as np

from search.scaling.pool import ScoredPool
from search.scaling.strategies.base import (
    EPS,
    Draws,
    StrategyOptions,
    StrategyResult,
    check_k,
    draw_verdicts,
)


def _mean(ones: np.ndarray, zeros: np.ndarray) -> np.ndarray:
    valid = ones + zeros
    return np.where(valid > 0, ones / np.maximum(valid, 1), -1.0)  # no parsable verdict: ranked last


def verdict_means(pool: ScoredPool, draws: Draws, k_verif: int, options: StrategyOptions) -> tuple[np.ndarray, np.ndarray]:
    """(mean verdict [S, Q, N] from k_verif drawn verdicts, passed-preliminary mask [S, Q, N])."""
    ones, zeros, bad = (np.broadcast_to(c, (draws.seeds, *c.shape)) for c in pool.verdict_counts())
    if not options.preliminary:
        d1, d0, _ = draw_verdicts(draws.rng, ones, zeros, bad, k_verif)
        return _mean(d1, d0), np.ones(d1.shape, bool)
    first = min(options.n_preliminary, k_verif)
    p1, p0, pb = draw_verdicts(draws.rng, ones, zeros, bad, first)
    passed = _mean(p1, p0) >= options.preliminary_threshold - EPS
    r1, r0, _ = draw_verdicts(draws.rng, ones - p1, zeros - p0, bad - pb, k_verif - first)
    return _mean(p1 + r1, p0 + r0), passed


def cap_per_class(classes: np.ndarray, keep: np.ndarray, cap: int) -> np.ndarray:
    """keep, limited to the first `cap` kept members of each class along the last axis."""
    k = classes.shape[-1]
    # Sort by (class, position) with dropped members last; rank = position within the run.
    key = np.where(keep, classes.astype(np.int64) + 1, np.int64(1) << 40) * k + np.arange(k)
    idx = np.argsort(key, axis=-1)
    sorted_cls = np.take_along_axis(np.where(keep, classes, -2), idx, -1)
    pos = np.broadcast_to(np.arange(k), sorted_cls.shape)
    new_run = np.concatenate([np.ones((*sorted_cls.shape[:-1], 1), bool),
                              sorted_cls[..., 1:] != sorted_cls[..., :-1]], -1)
    run_start = np.maximum.accumulate(np.where(new_run, pos, 0), axis=-1)
    rank = np.empty_like(pos)
    np.put_along_axis(rank, idx, pos - run_start, -1)
    return keep & (rank < cap)


def comparison_matrix(pool: ScoredPool) -> np.ndarray:
    """[Q, A+1, A+1] win rates with class 0 = no final answer (loses to everything); diagonal 0."""
    q, a = pool.answer_correct.shape
    p = np.zeros((q, a + 1, a + 1))
    p[:, 1:, 1:] = pool.compare_win
    p[:, 1:, 0] = 1.0
    idx = np.arange(a + 1)
    p[:, idx, idx] = 0.0
    return p


def select_classes(classes: np.ndarray, top: np.ndarray, compare: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Winning class (shifted: 0 = no answer) per [S, Q] among the top-group members."""
    s, q, _ = classes.shape
    width = compare.shape[-1]
    shifted = classes + 1
    flat = (np.arange(s * q).reshape(s, q, 1) * width + shifted)[top]
    counts = np.bincount(flat, minlength=s * q * width).reshape(s, q, width).astype(float)
    # wins[s, q, a] = sum_b counts[s, q, b] * P[q, a, b]: one batched matmul per question.
    wins = np.matmul(counts.transpose(1, 0, 2), compare.transpose(0, 2, 1)).transpose(1, 0, 2)
    others = counts.sum(-1, keepdims=True) - counts
    rate = np.where(others > 0, wins / np.maximum(others, 1), 0.0)
    key = rate + counts * 1e-7 + rng.random(counts.shape) * 1e-10
    return np.where(counts > 0, key, -np.inf).argmax(-1)


def verification(pool: ScoredPool, draws: Draws, *, k: int, k_verif: int | None, options: StrategyOptions) -> StrategyResult:
    if k_verif is None:
        raise ValueError("verification needs k_verif (verdicts per candidate)")
    check_k(pool, k, k_verif)
    means, passed = draws.cached(("verification", k_verif, options.preliminary),
                                 lambda: verdict_means(pool, draws, k_verif, options))
    m = draws.take(means, k)
    classes = draws.take_answers(k)
    if options.preliminary:
        eligible = cap_per_class(classes, draws.take(passed, k), options.max_per_answer)
        eligible |= ~eligible.any(-1, keepdims=True)  # nobody survived: fall back to everyone
        m = np.where(eligible, m, -np.inf)
    best = m.max(-1, keepdims=True)
    top = m >= best - options.top_margin - EPS
    chosen = select_classes(classes, top, draws.cached_compare(pool, comparison_matrix), draws.rng)
    qi = np.arange(pool.shape[0])[None, :]
    padded = np.concatenate([np.zeros((pool.shape[0], 1), bool), pool.answer_correct], 1)
    acc = padded[qi, chosen].mean(0)
    return StrategyResult("verification", k, k_verif, acc, exact=False)
