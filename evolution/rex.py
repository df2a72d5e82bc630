"""REX refinement parent choice (Tang et al. 2024, as SOAR uses it): Thompson sampling over
programs, each an arm with theta ~ Beta(1 + C*h, 1 + C*(1 - h) + N).

h (train accuracy) pulls a parent up; N, the times it was already refined, pushes it down,
so the search keeps exploring instead of refining the best-looking program forever. The
published code never updates N (it stays 0); here the caller owns a real counter
(code_hash -> times refined) and picks made in one call count towards the next pick.

The starting pool is balanced across accuracy bins so that refinement sees broken,
partly right and fully right programs, not just the largest bin (usually h == 0).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from evolution.records import Candidate

Bin = Literal["zero", "low", "medium", "all_train"]
# Round-robin order when drawing the pool: better bins first, so they get the remainder.
BINS: tuple[Bin, ...] = ("all_train", "medium", "low", "zero")


@dataclass(frozen=True)
class RexConfig:
    c: float = 20.0  # C: how strongly train accuracy h concentrates theta (paper: 20)
    low_max: float = 0.34  # "low" bin: 0 < h <= low_max
    medium_max: float = 0.98  # "medium" bin: low_max < h < medium_max; above: "all_train"

    def __post_init__(self) -> None:
        if self.c <= 0:
            raise ValueError(f"c: {self.c} must be > 0 (the paper uses 20)")
        if not 0.0 < self.low_max < self.medium_max <= 1.0:
            raise ValueError(f"low_max, medium_max: need 0 < low_max < medium_max <= 1, "
                             f"got {self.low_max}, {self.medium_max}")


def accuracy_bin(h: float, cfg: RexConfig | None = None) -> Bin:
    """SOAR's bins; "all_train" means every train pair right (the test is still unknown)."""
    cfg = cfg or RexConfig()
    if h <= 0.0:
        return "zero"
    if h <= cfg.low_max:
        return "low"
    return "medium" if h < cfg.medium_max else "all_train"


def sample_thetas(pool: Sequence[Candidate], n_refined: Mapping[str, int],
                  rng: np.random.Generator, cfg: RexConfig | None = None) -> np.ndarray:
    """One Thompson draw per candidate: theta ~ Beta(1 + C*h, 1 + C*(1-h) + N)."""
    cfg = cfg or RexConfig()
    h = np.array([c.train_accuracy for c in pool], dtype=float)
    n = np.array([n_refined.get(c.code_hash, 0) for c in pool], dtype=float)
    if (n < 0).any():
        raise ValueError("n_refined: counts must be >= 0 (times each parent was refined)")
    return rng.beta(1.0 + cfg.c * h, 1.0 + cfg.c * (1.0 - h) + n)


def choose_parents(pool: Sequence[Candidate], n_refined: Mapping[str, int], k: int,
                   rng: np.random.Generator, cfg: RexConfig | None = None) -> list[Candidate]:
    """``k`` parents, one Thompson draw each (argmax theta). A parent may be picked again;
    each pick adds 1 to its N for the later picks of this call. ``n_refined`` itself is
    not changed (see ``choose_and_count``)."""
    if k < 0:
        raise ValueError(f"k: {k} must be >= 0 (number of parents to pick)")
    if not pool or k == 0:
        return []
    counts = {c.code_hash: n_refined.get(c.code_hash, 0) for c in pool}
    picked: list[Candidate] = []
    for _ in range(k):
        best = pool[int(np.argmax(sample_thetas(pool, counts, rng, cfg)))]
        counts[best.code_hash] += 1
        picked.append(best)
    return picked


def choose_and_count(pool: Sequence[Candidate], n_refined: MutableMapping[str, int], k: int,
                     rng: np.random.Generator, cfg: RexConfig | None = None) -> list[Candidate]:
    """``choose_parents``, then record the picks in the caller's counter: each pick is a
    refinement about to be asked for, so it counts as refined from now on."""
    picked = choose_parents(pool, n_refined, k, rng, cfg)
    for c in picked:
        n_refined[c.code_hash] = n_refined.get(c.code_hash, 0) + 1
    return picked


def balanced_pool(candidates: Iterable[Candidate], size: int, rng: np.random.Generator,
                  keep: Callable[[Candidate], bool] | None = None,
                  cfg: RexConfig | None = None) -> list[Candidate]:
    """Up to ``size`` distinct programs, drawn round-robin from the non-empty accuracy bins
    (uniformly at random within a bin); a bin that runs short leaves its turns to the
    others. ``keep`` (e.g. ``lambda c: keep_for_refinement(c, task)``) excludes programs
    that the refinement filters drop."""
    if size < 0:
        raise ValueError(f"size: {size} must be >= 0")
    seen: set[str] = set()
    bins: dict[Bin, list[Candidate]] = {b: [] for b in BINS}
    for c in candidates:
        if c.code_hash in seen or (keep is not None and not keep(c)):
            continue
        seen.add(c.code_hash)
        bins[accuracy_bin(c.train_accuracy, cfg)].append(c)
    queues = [[members[i] for i in rng.permutation(len(members))]
              for members in bins.values() if members]
    pool: list[Candidate] = []
    while len(pool) < size and any(queues):
        for q in queues:
            if q and len(pool) < size:
                pool.append(q.pop(0))
    return pool


def bin_counts(pool: Iterable[Candidate], cfg: RexConfig | None = None) -> dict[Bin, int]:
    """How many of ``pool`` fall in each bin (for logs and tests)."""
    counts: dict[Bin, int] = {b: 0 for b in BINS}
    for c in pool:
        counts[accuracy_bin(c.train_accuracy, cfg)] += 1
    return counts
