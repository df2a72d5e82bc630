"""What every strategy shares: options, the random draws, the typed result, and the helpers.

Strategies are functions with one signature,

    strategy(pool, draws, *, k, k_verif, options) -> StrategyResult

that return the expected accuracy of each question when the strategy picks one answer from
k candidates (and k_verif verdicts per candidate), averaged over `draws.seeds` random
subsamples without replacement of the stored pool. pass@k and Best-of-N have exact
closed forms and ignore the draws.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from search.scored_pool import ScoredPool
from search.selection import EPS, SelectionOptions  # noqa: F401  (re-exported)

# Verification@k's options live with the selection code both paths share.
StrategyOptions = SelectionOptions

@dataclass
class StrategyResult:
    name: str
    k: int
    k_verif: int | None  # None: the strategy does not use verdicts
    per_question: np.ndarray  # float [Q]: expected accuracy of each question
    exact: bool  # closed form (True) or an average over subsamples (False)
    per_draw: np.ndarray | None = None  # [S, Q] accuracy of each subsample (None: exact forms)


@dataclass
class Draws:
    """The random subsamples every strategy sees (common random numbers across strategies).

    `order[s, q]` is a random permutation of question q's candidates for seed s; the
    k-subsample is its first k entries, which is a uniform subset without replacement for
    every k at once.
    """

    pool: ScoredPool
    seeds: int = 20
    seed: int = 0
    order: np.ndarray = field(init=False)
    rng: np.random.Generator = field(init=False)
    _cache: dict = field(init=False, default_factory=dict)
    _takes: dict = field(init=False, default_factory=dict)

    def __post_init__(self):
        if self.seeds < 1:
            raise ValueError(f"Draws.seeds={self.seeds} must be >= 1")
        self.rng = np.random.default_rng(self.seed)
        q, n, _ = self.pool.shape
        self.order = np.argsort(self.rng.random((self.seeds, q, n)), axis=-1).astype(np.int32)

    def take(self, array: np.ndarray, k: int) -> np.ndarray:
        """array [Q, N] (or [S, Q, N]) gathered on the first k of each permutation -> [S, Q, k]."""
        q = np.arange(array.shape[-2])[None, :, None]
        if array.ndim == 3:
            return array[np.arange(self.seeds)[:, None, None], q, self.order[..., :k]]
        return array[q, self.order[..., :k]]

    def take_answers(self, k: int) -> np.ndarray:
        """The pool's answer classes on the k-subsamples, kept per k (every grid row reuses them)."""
        key = ("answers", k)
        if key not in self._takes:
            self._takes[key] = self.take(self.pool.answer_ids, k)
        return self._takes[key]

    def cached_table(self, build) -> np.ndarray:
        """The pool's comparison outcome table, built once per Draws."""
        if "table" not in self._takes:
            self._takes["table"] = build()
        return self._takes["table"]

    def cached(self, key: tuple, build):
        """One cached value at a time (the last k_verif's scores): the grid loops k inside k_verif."""
        if key not in self._cache:
            self._cache.clear()
            self._cache[key] = build()
        return self._cache[key]


def check_k(pool: ScoredPool, k: int, k_verif: int | None) -> None:
    _, n, v = pool.shape
    if not 1 <= k <= n:
        raise ValueError(f"k={k} is out of range: the pool has {n} candidates per question")
    if k_verif is not None and not 1 <= k_verif <= v:
        raise ValueError(f"k_verif={k_verif} is out of range: the pool has {v} verdicts per candidate")


def hypergeometric(rng: np.random.Generator, good: np.ndarray, bad: np.ndarray, take: np.ndarray) -> np.ndarray:
    """How many `good` items a uniform draw of `take` from good+bad holds (elementwise)."""
    take = np.broadcast_to(take, np.broadcast_shapes(good.shape, bad.shape, np.shape(take)))
    g, b = np.broadcast_to(good, take.shape), np.broadcast_to(bad, take.shape)
    # Only mixed populations are random: no bad items means all drawn are good, no good
    # means none, drawing everything takes every good one (and numpy wants nsample >= 1).
    out = np.where(b == 0, take, np.where(take >= g + b, g, 0)).astype(np.int64)
    live = (take > 0) & (g > 0) & (b > 0) & (take < g + b)
    if live.any():
        out[live] = rng.hypergeometric(g[live], b[live], take[live])
    return out


def draw_verdicts(rng: np.random.Generator, ones: np.ndarray, zeros: np.ndarray, bad: np.ndarray,
                  take: int | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Draw `take` verdicts without replacement from (ones, zeros, unparsable) counts.

    Returns the drawn (ones, zeros, unparsable): the multivariate hypergeometric as two
    chained univariate draws, vectorized over every candidate of every seed.
    """
    take = np.asarray(take)
    drawn_bad = hypergeometric(rng, bad, ones + zeros, take)
    valid = take - drawn_bad
    drawn_ones = hypergeometric(rng, ones, zeros, valid)
    return drawn_ones, valid - drawn_ones, drawn_bad


def vote(classes: np.ndarray, weights: np.ndarray, n_classes: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Weighted vote per (seed, question) over answer classes; -1 (no answer) votes for nothing.

    classes, weights: [S, Q, k]. Returns (winning class [S, Q], whether any vote was cast).
    Ties go to a uniformly random tied class.
    """
    s, q, _ = classes.shape
    valid = classes >= 0
    flat = (np.arange(s * q).reshape(s, q, 1) * n_classes + np.where(valid, classes, 0))[valid]
    totals = np.bincount(flat, weights=weights[valid], minlength=s * q * n_classes).reshape(s, q, n_classes)
    cast = np.bincount(flat, minlength=s * q * n_classes).reshape(s, q, n_classes) > 0
    # A random key below any real weight gap breaks ties; classes with no votes never win.
    key = np.where(cast, totals + rng.random(totals.shape) * 1e-6, -np.inf)
    return key.argmax(-1), cast.any(-1)


def class_correct(pool: ScoredPool, classes: np.ndarray, any_vote: np.ndarray) -> np.ndarray:
    """Correctness [S, Q] of the chosen classes (no vote at all is wrong)."""
    q = pool.shape[0]
    ok = pool.answer_correct[np.arange(q)[None, :], np.maximum(classes, 0)]
    return ok & any_vote & (classes >= 0)
