"""Scaling curves from one stored pool: every strategy at every k (and k_verif), with CIs.

    curves = compute_curves(pool, CurvesConfig(seeds=20))
    curves.summary()["curves"]["verification"]   # [{k, accuracy, ci_low, ci_high}, ...]
    plot_curves(curves, "runs/exp")               # heatmap.png, curves.png, curves_ambiguous.png

Each point is the mean over questions of the per-question expected accuracy (subsampled
over `seeds` draws, or exact); its confidence interval is a percentile bootstrap over
questions, all points sharing the same resamples (one matrix product for every point), and
differences between strategies get a paired CI from those same resamples.
"Ambiguous" follows the paper at each k: a draw of k candidates counts when it holds a
correct one, and questions that full-pool majority vote already gets right are left out.
Taken over the whole pool instead, that curve rose with k even for a useless verifier.
"""

from __future__ import annotations

import csv
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from search.scored_pool import ScoredPool
from search.strategies import (
    STRATEGIES,
    USES_VERDICTS,
    Draws,
    StrategyOptions,
    get_strategy,
)

Subset = Literal["all", "ambiguous"]


def powers_up_to(n: int) -> list[int]:
    """1, 2, 4, ... below n, then n itself: the usual log-spaced grid."""
    out = [1 << i for i in range(n.bit_length()) if 1 << i < n]
    return out + [n]


@dataclass
class CurvesConfig:
    strategies: list[str] = field(default_factory=lambda: list(STRATEGIES))  # names in search.strategies.STRATEGIES
    k_values: list[int] = field(default_factory=list)  # candidates per point; empty: 1, 2, 4, ..., k_inf
    k_verif_values: list[int] = field(default_factory=list)  # verdicts per candidate; empty: 1, 2, 4, ..., k_verif
    seeds: int = 20  # subsamples averaged per point
    bootstrap: int = 1000  # resamples of the questions for the confidence intervals
    confidence: float = 0.95  # central interval mass
    seed: int = 0  # subsampling and bootstrap seed
    options: StrategyOptions = field(default_factory=StrategyOptions)  # Verification@k settings

    def __post_init__(self):
        for name in self.strategies:
            get_strategy(name)  # raises, listing the known names
        if self.seeds < 1 or self.bootstrap < 1:
            raise ValueError("CurvesConfig.seeds and CurvesConfig.bootstrap must be >= 1")
        if not 0 < self.confidence < 1:
            raise ValueError(f"CurvesConfig.confidence={self.confidence} must be in (0, 1)")


@dataclass
class CurvePoint:
    strategy: str
    subset: Subset
    k: int
    k_verif: int | None
    accuracy: float
    ci_low: float
    ci_high: float
    questions: int


@dataclass
class Curves:
    points: list[CurvePoint]
    k_values: list[int]
    k_verif_values: list[int]
    pool_shape: tuple[int, int, int]
    ambiguous: int  # questions with a correct candidate that full-pool majority vote gets wrong
    differences: list[dict[str, Any]] = field(default_factory=list)  # paired CIs, see compute_curves
    unparsable: dict[str, float] = field(default_factory=dict)  # share of unparsable verdicts, comparisons
    # (strategy, baseline, k) -> the difference per question behind each `differences` row (for pooling runs)
    per_question: dict[tuple[str, str, int], np.ndarray] = field(default_factory=dict, repr=False)

    def curve(self, strategy: str, subset: Subset = "all") -> list[CurvePoint]:
        """Accuracy vs k; strategies that use verdicts at the largest k_verif."""
        kv = max(self.k_verif_values) if strategy in USES_VERDICTS else None
        return sorted((p for p in self.points if p.strategy == strategy and p.subset == subset and p.k_verif == kv),
                      key=lambda p: p.k)

    def heatmap(self, subset: Subset = "all", strategy: str = "verification") -> np.ndarray:
        """Accuracy [len(k_values), len(k_verif_values)] of a verdict-using strategy."""
        grid = np.full((len(self.k_values), len(self.k_verif_values)), np.nan)
        for p in self.points:
            if p.strategy == strategy and p.subset == subset and p.k_verif is not None:
                grid[self.k_values.index(p.k), self.k_verif_values.index(p.k_verif)] = p.accuracy
        return grid

    def strategies(self) -> list[str]:
        return list(dict.fromkeys(p.strategy for p in self.points))

    def summary(self) -> dict[str, Any]:
        def rows(s: str, subset: Subset) -> list[dict[str, float]]:
            return [{"k": p.k, "accuracy": p.accuracy, "ci_low": p.ci_low, "ci_high": p.ci_high}
                    for p in self.curve(s, subset)]

        out: dict[str, Any] = {
            "pool": dict(zip(("questions", "k_inf", "k_verif"), self.pool_shape, strict=True)),
            "ambiguous_questions": self.ambiguous,
            "curves": {s: rows(s, "all") for s in self.strategies()},
            "curves_ambiguous": {s: rows(s, "ambiguous") for s in self.strategies() if self.curve(s, "ambiguous")},
            "differences": self.differences,
            "unparsable": self.unparsable,
        }
        if any(s in USES_VERDICTS for s in self.strategies()):
            out["heatmap"] = {"k_values": self.k_values, "k_verif_values": self.k_verif_values,
                              "accuracy": np.round(self.heatmap(), 6).tolist()}
            # implicit scaling: on ambiguous draws, more verdicts per candidate should help
            out["heatmap_ambiguous"] = {"k_values": self.k_values, "k_verif_values": self.k_verif_values,
                                        "accuracy": [[None if np.isnan(x) else round(float(x), 6) for x in row]
                                                     for row in self.heatmap("ambiguous")]}
        return out

    def write_csv(self, path: str | Path) -> None:
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(CurvePoint.__dataclass_fields__))
            w.writeheader()
            w.writerows(asdict(p) for p in self.points)


def resample_counts(q: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """[B, Q]: how often each question is drawn in each bootstrap resample."""
    return rng.multinomial(q, np.full(q, 1.0 / q), size=resamples)


def bootstrap_ci(per_question: np.ndarray, resamples: int | np.ndarray, confidence: float,
                 rng: np.random.Generator | None = None, weights: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Percentile CIs of sum(per_question) / sum(weights) over resampled questions, every row at once.

    per_question [P, Q]; weights [P, Q] (default 1: the plain mean); `resamples` is a count or
    the [B, Q] counts themselves, so that several calls share one set of resamples (paired CIs).
    """
    counts = resample_counts(per_question.shape[1], resamples, rng) if np.isscalar(resamples) else resamples
    weights = np.ones_like(per_question, float) if weights is None else weights
    means = (per_question @ counts.T) / np.maximum(weights @ counts.T, 1e-12)  # [P, B]
    tail = (1 - confidence) / 2 * 100
    return np.percentile(means, tail, axis=1), np.percentile(means, 100 - tail, axis=1)


# Paired comparisons reported at every k: (strategy, baseline). Weighted Best-of-N is the verifier's score
# added to the votes (summed per answer): the verifier as a second signal rather than the only one.
DIFFERENCES = (("verification", "consistency"), ("verification_tie", "consistency"),
               ("weighted_best_of_n", "consistency"))


def compute_curves(pool: ScoredPool, cfg: CurvesConfig) -> Curves:
    q, n, v = pool.shape
    ks = sorted(set(cfg.k_values)) or powers_up_to(n)
    kvs = sorted(set(cfg.k_verif_values)) or powers_up_to(v)
    bad = [k for k in ks if not 1 <= k <= n] + [k for k in kvs if not 1 <= k <= v]
    if bad:
        raise ValueError(f"CurvesConfig k_values/k_verif_values {bad} are outside the pool's k_inf={n}, k_verif={v}")
    draws = Draws(pool, seeds=cfg.seeds, seed=cfg.seed)
    keys: list[tuple[str, int, int | None]] = []
    rows: list[np.ndarray] = []
    amb_num: list[np.ndarray | None] = []
    amb_den: list[np.ndarray | None] = []
    solved = pool.consistency_solves()
    for name in cfg.strategies:
        fn = get_strategy(name)
        for kv in (kvs if name in USES_VERDICTS else [None]):
            for k in ks:
                res = fn(pool, draws, k=k, k_verif=kv, options=cfg.options)
                keys.append((name, k, kv))
                rows.append(res.per_question)
                if res.per_draw is None:  # exact forms have no draws to condition on
                    amb_num.append(None)
                    amb_den.append(None)
                    continue
                mask = draws.take(pool.correct, k).any(-1) & ~solved[None, :]  # [S, Q]
                amb_num.append((res.per_draw * mask).sum(0))
                amb_den.append(mask.sum(0).astype(float))
    per_q = np.stack(rows)  # [P, Q]
    counts = resample_counts(q, cfg.bootstrap, np.random.default_rng(cfg.seed + 1))
    points: list[CurvePoint] = []
    lo, hi = bootstrap_ci(per_q, counts, cfg.confidence)
    for (name, k, kv), acc, a, b in zip(keys, per_q.mean(1), lo, hi, strict=True):
        points.append(CurvePoint(name, "all", k, kv, float(acc), float(a), float(b), q))
    has = [i for i, x in enumerate(amb_num) if x is not None and amb_den[i].sum() > 0]
    if has:
        num, den = np.stack([amb_num[i] for i in has]), np.stack([amb_den[i] for i in has])
        lo, hi = bootstrap_ci(num, counts, cfg.confidence, weights=den)
        for i, nu, de, a, b in zip(has, num, den, lo, hi, strict=True):
            name, k, kv = keys[i]
            # questions: the mean number of ambiguous questions per draw
            points.append(CurvePoint(name, "ambiguous", k, kv, float(nu.sum() / de.sum()), float(a), float(b),
                                     int(round(de.sum() / cfg.seeds))))
    index = {key: i for i, key in enumerate(keys)}
    differences, per_question = [], {}
    for a_name, b_name in DIFFERENCES:
        kv = max(kvs) if a_name in USES_VERDICTS else None
        for k in ks:
            if (a_name, k, kv) in index and (b_name, k, None) in index:
                diff = per_q[index[(a_name, k, kv)]] - per_q[index[(b_name, k, None)]]
                per_question[(a_name, b_name, k)] = diff
                lo, hi = bootstrap_ci(diff[None], counts, cfg.confidence)
                differences.append({"strategy": a_name, "baseline": b_name, "k": k, "k_verif": kv,
                                    "difference": float(diff.mean()), "ci_low": float(lo[0]),
                                    "ci_high": float(hi[0])})
    amb = int((pool.ambiguous() & ~solved).sum())
    return Curves(points, ks, kvs, (q, n, v), amb, differences, pool.unparsable_rates(), per_question)


LABELS = {"pass": "pass@k (oracle)", "consistency": "Consistency@k", "best_of_n": "Best-of-N",
          "weighted_best_of_n": "weighted Best-of-N", "verification": "Verification@k",
          "verification_tie": "Verification@k + tie-break"}


def plot_curves(curves: Curves, out_dir: str | Path) -> list[Path]:
    """heatmap.png (Verification@k over k x k_verif), curves.png and curves_ambiguous.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    written = []
    if "verification" in curves.strategies():
        grid = curves.heatmap()
        fig, ax = plt.subplots(figsize=(1.2 + 0.7 * len(curves.k_verif_values), 1.2 + 0.5 * len(curves.k_values)))
        im = ax.imshow(grid, origin="lower", cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(curves.k_verif_values)), curves.k_verif_values)
        ax.set_yticks(range(len(curves.k_values)), curves.k_values)
        ax.set_xlabel("verifications per candidate (k_verif)")
        ax.set_ylabel("candidates (k_inf)")
        for i in range(grid.shape[0]):
            for j in range(grid.shape[1]):
                ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=7, color="w")
        fig.colorbar(im, label="Verification@k accuracy")
        ax.set_title("Verification@k accuracy")
        fig.tight_layout()
        written.append(out_dir / "heatmap.png")
        fig.savefig(written[-1], dpi=120)
        plt.close(fig)
    for subset, name in (("all", "curves.png"), ("ambiguous", "curves_ambiguous.png")):
        fig, ax = plt.subplots(figsize=(6, 4))
        for s in curves.strategies():
            pts = curves.curve(s, subset)  # type: ignore[arg-type]
            if not pts:
                continue
            k = [p.k for p in pts]
            ax.plot(k, [p.accuracy for p in pts], marker="o", label=LABELS.get(s, s))
            ax.fill_between(k, [p.ci_low for p in pts], [p.ci_high for p in pts], alpha=0.15)
        ax.set_xscale("log", base=2)
        ks = sorted({p.k for s in curves.strategies() for p in curves.curve(s, subset)})  # type: ignore[arg-type]
        if ks:  # the k that were measured, written as numbers (not 2^n), no minor ticks between them
            ax.set_xticks(ks, [str(k) for k in ks])
            ax.minorticks_off()
        ax.set_xlabel("candidates per question (k)")
        ax.set_ylabel("accuracy (fraction of questions)")
        title = "all questions" if subset == "all" else f"ambiguous questions ({curves.ambiguous})"
        ax.set_title(f"accuracy vs k, {title}")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
        else:  # e.g. no question has a correct candidate: say so instead of an empty legend
            ax.text(0.5, 0.5, "no questions in this subset", ha="center", transform=ax.transAxes)
        fig.tight_layout()
        written.append(out_dir / name)
        fig.savefig(written[-1], dpi=120)
        plt.close(fig)
    return written
