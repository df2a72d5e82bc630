"""Verification@k selection: the ONE implementation the offline replay and the live search share.

Both paths hand these functions the same things, arrays over the last axis of k candidates
(offline with leading [seeds, questions] axes, live with none):

    answer ids (-1 = no final answer), verdict counts, preliminary scores
        -> shortlist(): the top group, and whether it needs a tie-break
        -> matchups() + tie_plan(): which ordered comparisons to make
        -> tie_winner(): the candidate with the most wins

Decisions, each made once here (REFERENCES, "Sampling-based search with self-verification"):
- a candidate's score counts an unparsable verdict as 0: dropping it would give candidates
  with fewer parsable verdicts noisier means, which win the max more often;
- candidates without a final answer are never selected while any candidate has one (they
  cannot be right, and letting them into the top group changed the tie-break's winner);
- the preliminary round keeps the top `max_per_answer` per answer *by preliminary score*;
- the tie-break plays k_tie comparisons *per matchup* (every pair of top-group candidates
  with different answers), half with each candidate first, and selects the candidate with
  the most wins; without the tie-break (the paper's scaling figures) the best score wins;
- remaining ties go to the lower index: deterministic, so both paths agree on the same
  verdicts (offline candidates arrive in random order, so this is a random tie-break there).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Scores within this float slack of the top-group boundary count as inside it.
EPS = 1e-9


@dataclass
class SelectionOptions:
    top_margin: float = 0.05  # candidates within this of the best score form the top group
    tie_break: bool = True  # settle a disagreeing top group by comparisons (the curves report both ways)
    k_tie: int = 4  # comparisons per matchup (REFERENCES: 100), half with each candidate first
    preliminary: bool = False  # score a few verdicts first and drop weak candidates before the rest
    n_preliminary: int = 10  # verdicts in the preliminary round
    preliminary_threshold: float = 0.2  # drop candidates whose preliminary score is below this
    max_per_answer: int = 15  # after the preliminary round keep the top this many per answer
    # A candidate's score from its drawn verdicts: their share of 1s (the paper), or their mean
    # probability of 1 (verdicts decoded under the choice regex store it: verifiers.verdicts)
    score: str = "verdicts"

    def __post_init__(self):
        if not 0 <= self.top_margin < 1:
            raise ValueError(f"top_margin={self.top_margin} must be in [0, 1)")
        if self.n_preliminary < 1 or self.max_per_answer < 1:
            raise ValueError("n_preliminary and max_per_answer must be >= 1")
        if self.k_tie < 0:
            raise ValueError(f"k_tie={self.k_tie} must be >= 0 (0: no comparisons)")
        if self.score not in ("verdicts", "probability"):
            raise ValueError(f"score={self.score!r} must be 'verdicts' or 'probability'")
        if not 0 <= self.preliminary_threshold <= 1:
            raise ValueError(f"preliminary_threshold={self.preliminary_threshold} must be in [0, 1]")


def verdict_score(ones: np.ndarray, drawn: np.ndarray | int) -> np.ndarray:
    """Mean verdict with unparsable ones counted as 0: ones / verdicts drawn."""
    drawn = np.asarray(drawn)
    return np.where(drawn > 0, np.asarray(ones) / np.maximum(drawn, 1), 0.0)


def answered(answer_ids: np.ndarray) -> np.ndarray:
    """Who may be selected: candidates with a final answer (everyone when nobody has one)."""
    has = answer_ids >= 0
    return has | ~has.any(-1, keepdims=True)


def top_per_answer(answer_ids: np.ndarray, keep: np.ndarray, score: np.ndarray, cap: int) -> np.ndarray:
    """keep, limited to the `cap` best-scored kept members of each answer (lower index first on ties)."""
    k = answer_ids.shape[-1]
    pos = np.broadcast_to(np.arange(k), answer_ids.shape)
    cls = np.where(keep, answer_ids.astype(np.int64) + 1, np.int64(1) << 40)  # dropped members sort last
    idx = np.lexsort((pos, -np.asarray(score, float), cls), axis=-1)
    sorted_cls = np.take_along_axis(cls, idx, -1)
    new_run = np.concatenate([np.ones((*sorted_cls.shape[:-1], 1), bool),
                              sorted_cls[..., 1:] != sorted_cls[..., :-1]], -1)
    run_start = np.maximum.accumulate(np.where(new_run, pos, 0), axis=-1)
    rank = np.empty_like(pos)
    np.put_along_axis(rank, idx, pos - run_start, -1)
    return keep & (rank < cap)


def preliminary_keep(answer_ids: np.ndarray, prelim: np.ndarray, options: SelectionOptions) -> np.ndarray:
    """Candidates that survive the preliminary round (all eligible ones when nobody does)."""
    eligible = answered(answer_ids)
    passed = eligible & (prelim >= options.preliminary_threshold - EPS)
    kept = top_per_answer(answer_ids, passed, prelim, options.max_per_answer)
    return np.where(kept.any(-1, keepdims=True), kept, eligible)


def shortlist(answer_ids: np.ndarray, score: np.ndarray, options: SelectionOptions,
              prelim: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(top group mask, best-scored candidate index, whether the top group disagrees on the answer).

    The best-scored candidate is the selection without a tie-break (and with an agreeing top
    group); a disagreeing one, with options.tie_break, goes to matchups()/tie_winner().
    """
    eligible = preliminary_keep(answer_ids, prelim, options) if options.preliminary else answered(answer_ids)
    masked = np.where(eligible, score, -np.inf)
    best = masked.max(-1, keepdims=True)
    top = eligible & (masked >= best - options.top_margin - EPS)
    first = np.argmax(masked, axis=-1)  # the lowest index among the best scores
    lo = np.where(top, answer_ids, np.iinfo(np.int32).max).min(-1)
    hi = np.where(top, answer_ids, np.iinfo(np.int32).min).max(-1)
    return top, first, lo != hi


def matchups(top: np.ndarray, answer_ids: np.ndarray) -> np.ndarray:
    """Matchup mask [..., k, k]: pairs i < j of top-group candidates whose answers differ."""
    k = top.shape[-1]
    upper = np.triu(np.ones((k, k), bool), 1)
    return upper & top[..., :, None] & top[..., None, :] & (answer_ids[..., :, None] != answer_ids[..., None, :])


def tie_plan(k_tie: int) -> tuple[int, int]:
    """(comparisons with the lower index first, with it second) of one matchup."""
    return (k_tie + 1) // 2, k_tie // 2


def tie_winner(top: np.ndarray, wins: np.ndarray, score: np.ndarray) -> np.ndarray:
    """The top-group candidate with the most comparison wins; then the best score, then lowest index.

    wins[..., i, j] = comparisons candidate i won against candidate j (unparsable ones count
    for nobody). Returns the index [...] (a 0-d array for one question).
    """
    k = top.shape[-1]
    total = np.where(top, wins.sum(-1), -1)
    pos = np.broadcast_to(np.arange(k), top.shape)
    order = np.lexsort((pos, -np.where(top, score, -np.inf), -total), axis=-1)
    return order[..., 0]
