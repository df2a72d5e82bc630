"""ScoredPool: one stored run of candidates, verdicts and comparisons, as dense arrays.

Every strategy and every point of every scaling curve is computed from this one pool by
subsampling, so the sampling budget is spent once (k_inf candidates x k_verif verdicts per
question) and the curves at every smaller (k, k_verif) come for free.

Arrays (Q questions, N candidates each, V verdicts per candidate, A answer classes):
- correct       bool [Q, N]   the candidate's final answer matches the gold answer
- answer_ids    int  [Q, N]   equivalence class of its final answer; -1 = no final answer
- answer_correct bool [Q, A]  whether class a is the gold answer (padding classes: False)
- verdicts      int8 [Q, N, V] self-verification: 1, 0, or -1 = unparsable (never guessed)
- compare_counts int [Q, A, A, 3] the stored pairwise comparisons of a response answering a
                (shown first) against one answering b (second): [first won, second won,
                unparsable]; the tie-break replays draws from these, per ordered pair
- score         float [Q, N]  a scalar score for Best-of-N (default: mean verdict over all V)
- verdict_probs float [Q, N, V] each verdict's probability of 1 (verifiers.verdicts), NaN where
                the verdicts were parsed from free text (no probability)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from search.selection import verdict_score

ARRAYS = ("correct", "answer_ids", "answer_correct", "verdicts", "compare_counts", "score", "verdict_probs")
Score = Literal["verdicts", "probability"]  # a candidate's score: its share of 1 verdicts, or their mean probability


@dataclass
class ScoredPool:
    question_ids: list[str]
    correct: np.ndarray
    answer_ids: np.ndarray
    answer_correct: np.ndarray
    verdicts: np.ndarray
    compare_counts: np.ndarray
    score: np.ndarray
    verdict_probs: np.ndarray | None = None  # None: no probabilities (all NaN)

    def __post_init__(self):
        q, n = self.correct.shape
        v = self.verdicts.shape[2]
        a = self.answer_correct.shape[1]
        if self.verdict_probs is None:
            self.verdict_probs = np.full(self.verdicts.shape, np.nan, np.float32)
        want = {"answer_ids": (q, n), "verdicts": (q, n, v), "compare_counts": (q, a, a, 3), "score": (q, n),
                "verdict_probs": (q, n, v)}
        for name, shape in want.items():
            if getattr(self, name).shape != shape:
                raise ValueError(f"ScoredPool.{name} has shape {getattr(self, name).shape}, expected {shape}")
        if len(self.question_ids) != q:
            raise ValueError(f"ScoredPool.question_ids has {len(self.question_ids)} ids for {q} questions")
        if self.answer_ids.max(initial=-1) >= a:
            raise ValueError("ScoredPool.answer_ids refers to a class beyond answer_correct's width")

    @property
    def shape(self) -> tuple[int, int, int]:
        """(questions, candidates per question, verdicts per candidate)."""
        return self.correct.shape[0], self.correct.shape[1], self.verdicts.shape[2]

    def verdict_counts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ones, zeros, unparsable) per candidate, int64 [Q, N]: verdicts are exchangeable."""
        v = self.verdicts
        return (v == 1).sum(-1), (v == 0).sum(-1), (v < 0).sum(-1)

    def ambiguous(self) -> np.ndarray:
        """Questions with at least one correct candidate in the whole pool (see curves for the per-k rule)."""
        return self.correct.any(axis=1)

    def consistency_solves(self) -> np.ndarray:
        """Questions whose full-pool majority answer is correct and unique (the paper leaves them
        out of "ambiguous": voting already gets them right)."""
        q, a = self.answer_correct.shape
        votes = np.zeros((q, a), np.int64)
        qi, n = np.nonzero(self.answer_ids >= 0)
        np.add.at(votes, (qi, self.answer_ids[qi, n]), 1)
        best = votes.max(1, keepdims=True)
        winners = (votes == best) & (best > 0)
        return (winners & self.answer_correct).any(1) & (winners.sum(1) == 1)

    @property
    def has_probs(self) -> bool:
        """Whether every verdict has its probability (a constrained mode stored them all)."""
        return bool(self.verdict_probs.size) and not np.isnan(self.verdict_probs).any()

    def scores(self, score: Score) -> np.ndarray:
        """A candidate's score [Q, N] over all its verdicts: share of 1s, or mean probability."""
        if score == "verdicts":
            return mean_verdict(self.verdicts)
        if not self.has_probs:
            raise ValueError("score='probability' needs every verdict's probability: sample with verdict=constrained "
                             "or verdict=reasoned (verdict=parsed stores none)")
        return self.verdict_probs.mean(-1)

    def unparsable_rates(self) -> dict[str, float]:
        """Share of verdicts and of stored comparisons that could not be parsed."""
        games = self.compare_counts.sum()
        return {"verdicts": float((self.verdicts < 0).mean()) if self.verdicts.size else 0.0,
                "comparisons": float(self.compare_counts[..., 2].sum() / games) if games else 0.0}

    def own_verification(self) -> dict[str, float | int]:
        """How the verdicts judge the pool's own candidates: the share of 1 verdicts on correct
        candidates and of 0 verdicts on wrong ones (unparsable counts as neither). The benchmark's
        triples are constructed; this is the accuracy that the search actually gets.

        Selection happens within a question, so what decides Verification@k against
        Consistency@k is how well each signal ranks one question's correct candidates above its
        wrong ones: `within_question_auc` for the mean verdict, `answer_frequency_auc` for the
        votes of the candidate's answer (majority voting's signal), each averaged over the
        `mixed_questions` that have both. `pooled_auc` ranks all candidates together; a verifier
        that only learned which questions are hard scores well there and at chance within one."""
        v, c = self.verdicts, self.correct
        ones, zeros = (v == 1).mean(-1), (v == 0).mean(-1)
        score = mean_verdict(v)
        mixed = c.any(1) & ~c.all(1)
        out = {"on_correct": float(ones[c].mean()) if c.any() else float("nan"),
               "on_wrong": float(zeros[~c].mean()) if (~c).any() else float("nan"),
               "correct_candidates": int(c.sum()), "wrong_candidates": int((~c).sum()),
               "pooled_auc": auc(score.ravel(), c.ravel()),
               "within_question_auc": _mean_or_nan(question_aucs(score, c)[mixed]),
               "answer_frequency_auc": _mean_or_nan(question_aucs(answer_votes(self.answer_ids), c)[mixed]),
               "mixed_questions": int(mixed.sum())}
        if self.has_probs:  # the same rankings by the mean probability of 1 (verifiers.verdicts)
            prob = self.scores("probability")
            out |= {"probability_on_correct": float(prob[c].mean()) if c.any() else float("nan"),
                    "probability_on_wrong": float(prob[~c].mean()) if (~c).any() else float("nan"),
                    "pooled_auc_probability": auc(prob.ravel(), c.ravel()),
                    "within_question_auc_probability": _mean_or_nan(question_aucs(prob, c)[mixed])}
        return out

    def subset(self, mask: np.ndarray) -> ScoredPool:
        idx = np.flatnonzero(mask)
        return ScoredPool([self.question_ids[i] for i in idx], *(getattr(self, n)[idx] for n in ARRAYS))

    def save(self, path: str | Path) -> None:
        np.savez_compressed(path, question_ids=np.array(self.question_ids), **{n: getattr(self, n) for n in ARRAYS})

    @classmethod
    def load(cls, path: str | Path) -> ScoredPool:
        with np.load(path) as f:  # pools saved before verdict_probs existed load with none
            return cls([str(x) for x in f["question_ids"]], *(f[n] if n in f else None for n in ARRAYS))

    @classmethod
    def from_records(cls, records: list[dict[str, Any]], score: Score = "verdicts") -> ScoredPool:
        """Build from per-question records (what the scaling job stores in Redis); `score`: Best-of-N's.

        A record: {"id", "candidates": [{"answer_id", "correct", "verdicts": [1, 0, -1, ...],
        "verdict_probs": [0.7, ...] or None}],
        "answer_correct": [bool per class], "comparisons": [[class_a, class_b, winner 1|2|-1], ...]}
        (class_a's response shown first; -1 = unparsable).
        Every question must have the same number of candidates and verdicts.
        """
        if not records:
            raise ValueError("no question records: the pool is empty")
        n = {len(r["candidates"]) for r in records}
        v = {len(c["verdicts"]) for r in records for c in r["candidates"]}
        if len(n) != 1 or len(v) != 1:
            raise ValueError(f"records disagree on candidates per question {sorted(n)} or verdicts per candidate "
                             f"{sorted(v)}; finish sampling (the job resumes) before computing curves")
        (n,), (v,) = n, v
        q = len(records)
        a = max(1, max(len(r["answer_correct"]) for r in records))
        correct = np.zeros((q, n), bool)
        answer_ids = np.full((q, n), -1, np.int32)
        answer_correct = np.zeros((q, a), bool)
        verdicts = np.zeros((q, n, v), np.int8)
        probs = np.full((q, n, v), np.nan, np.float32)
        counts = np.zeros((q, a, a, 3), np.int32)
        for i, r in enumerate(records):
            for j, c in enumerate(r["candidates"]):
                correct[i, j] = bool(c["correct"])
                answer_ids[i, j] = c["answer_id"]
                verdicts[i, j] = c["verdicts"]
                if c.get("verdict_probs") is not None:  # a missing probability stays NaN
                    probs[i, j] = [np.nan if x is None else x for x in c["verdict_probs"]]
            answer_correct[i, : len(r["answer_correct"])] = r["answer_correct"]
            for x, y, winner in r.get("comparisons", []):
                if x != y:  # same-answer comparisons cannot decide between answers
                    counts[i, x, y, {1: 0, 2: 1}.get(winner, 2)] += 1
        pool = cls([str(r["id"]) for r in records], correct, answer_ids, answer_correct, verdicts, counts,
                   mean_verdict(verdicts), probs)
        pool.score = pool.scores(score)
        return pool


def auc(score: np.ndarray, correct: np.ndarray) -> float:
    """The chance that a random correct candidate scores above a random wrong one (ties count
    half), by ranks (ties share their mean rank); NaN without both kinds."""
    score, correct = np.asarray(score, float).ravel(), np.asarray(correct, bool).ravel()
    n_pos, n_neg = int(correct.sum()), int((~correct).sum())
    if not n_pos or not n_neg:
        return float("nan")
    _, inverse, counts = np.unique(score, return_inverse=True, return_counts=True)
    mean_rank = np.cumsum(counts) - (counts - 1) / 2  # 1-based mean rank of each distinct value
    return float((mean_rank[inverse][correct].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def question_aucs(score: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """auc() of each question [Q] from score and correct [Q, N]."""
    return np.array([auc(s, c) for s, c in zip(score, correct, strict=True)])


def answer_votes(answer_ids: np.ndarray) -> np.ndarray:
    """Per candidate [Q, N]: how many of its question's candidates give the same final answer
    (0 for no answer), the count majority voting ranks answers by."""
    same = (answer_ids[:, :, None] == answer_ids[:, None, :]) & (answer_ids[:, None, :] >= 0)
    return np.where(answer_ids >= 0, same.sum(-1), 0)


def _mean_or_nan(x: np.ndarray) -> float:
    return float(x.mean()) if x.size else float("nan")


def mean_verdict(verdicts: np.ndarray) -> np.ndarray:
    """Share of 1 verdicts, unparsable ones counted as 0 (search.selection.verdict_score)."""
    return verdict_score((verdicts == 1).sum(-1), verdicts.shape[-1])


def synthetic_pool(
    questions: int = 100, candidates: int = 64, verdicts: int = 16, seed: int = 0,
    wrong_classes: int = 6, true_positive: float = 0.8, false_positive: float = 0.3,
    unparsable: float = 0.02, compare_accuracy: float = 0.75, no_answer: float = 0.05,
) -> ScoredPool:
    """A random pool with a verifier better than chance: for tests and the benchmark.

    Each question has its own solve rate; wrong answers spread over a few classes with a
    Zipf-like skew (a popular wrong answer, as real models have); each candidate's chance
    of a 1 verdict is drawn around true_positive (correct) or false_positive (wrong).
    """
    rng = np.random.default_rng(seed)
    q, n, v = questions, candidates, verdicts
    solve = rng.beta(0.7, 1.2, size=(q, 1))
    correct = rng.random((q, n)) < solve
    skew = 1.0 / np.arange(1, wrong_classes + 1)
    wrong = rng.choice(np.arange(1, wrong_classes + 1), size=(q, n), p=skew / skew.sum())
    answer_ids = np.where(correct, 0, wrong).astype(np.int32)
    answer_ids[(rng.random((q, n)) < no_answer) & ~correct] = -1
    p_yes = np.where(correct, true_positive, false_positive) + rng.normal(0, 0.1, (q, n))
    p_yes = np.clip(p_yes, 0.01, 0.99)[..., None]
    verdict = (rng.random((q, n, v)) < p_yes).astype(np.int8)
    verdict[rng.random((q, n, v)) < unparsable] = -1
    a = wrong_classes + 1
    answer_correct = np.zeros((q, a), bool)
    answer_correct[:, 0] = True
    # 20 stored comparisons per ordered pair of answers; the right answer wins compare_accuracy
    # of them, wrong-vs-wrong is a coin flip
    p_first = np.full((a, a), 0.5)
    p_first[0, 1:] = compare_accuracy
    p_first[1:, 0] = 1 - compare_accuracy
    n_bad = rng.binomial(20, unparsable, (q, a, a))
    first = rng.binomial(20 - n_bad, np.broadcast_to(p_first, (q, a, a)))
    win = np.stack([first, 20 - n_bad - first, n_bad], -1).astype(np.int32)
    win[:, np.arange(a), np.arange(a)] = 0
    ids = [f"synthetic-{seed}-{i}" for i in range(q)]
    return ScoredPool(ids, correct, answer_ids, answer_correct, verdict, win, mean_verdict(verdict))
