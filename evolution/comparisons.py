"""The last iteration's model against the seed model and the controls, paired by sampling seed.

Every measured sampler runs the same search with the same sampling seeds, so seed s of the
model and seed s of a control share their randomness where they can (task order, REX draws):
the differences are paired, and their 95% CI is mean ± t(0.975, n-1) · sd / sqrt(n). A claim
that the model learned needs the whole interval above 0.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

# t(0.975, df) for df = 1..30; beyond, t975() expands around the normal quantile (the plain
# 1.96 was 4% narrow at df = 31: a "95%" interval that covered less).
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)
METRICS = ("solved_seeds", "heldout_solved_seeds", "hit_rate_seeds", "heldout_hit_rate_seeds")
# in the report's order: the control that answers "did the hindsight rows teach it?" first
AGAINST = {"seed_only_control": "the seed-only control", "seed_model": "the seed model (iteration 0)",
           "random_prior": "the random-program prior", "model_mix_thompson": "the model mix (Thompson bandit)",
           "model_mix_uniform": "the model mix (uniform split)"}


def t975(df: int) -> float:
    """t(0.975, df): the table up to 30, then the Cornish-Fisher expansion (within 1e-4 there)."""
    if df <= len(T975):
        return T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def paired_difference(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """a - b seed by seed: mean, sample sd, the 95% CI of the mean, and the differences."""
    if len(a) != len(b):
        raise ValueError(f"paired values need the same seeds: {len(a)} against {len(b)}")
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    n = len(diffs)
    mean = statistics.fmean(diffs) if diffs else float("nan")
    if n < 2:
        return {"n": n, "mean": mean, "sd": None, "ci95": None, "diffs": diffs}
    sd = statistics.stdev(diffs)
    half = t975(n - 1) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "ci95": [mean - half, mean + half], "diffs": diffs}


def comparisons(entries: list[dict[str, Any]], baselines: dict[str, Any] | None) -> dict[str, Any]:
    """{"last_minus_<other>": {metric: paired difference}} for every measured other sampler."""
    measured = [e for e in entries if "solved_seeds" in e]
    if len(measured) < 1:
        return {}
    last = measured[-1]
    first = measured[0]
    others = {"seed_model": first} if len(measured) > 1 and first.get("iteration", 0) == 0 else {}
    others |= {k: v for k, v in (baselines or {}).items() if "solved_seeds" in v}
    out = {}
    for name, other in others.items():
        if other.get("seeds") != last.get("seeds"):
            continue  # measured on other seeds: not paired
        out[f"last_minus_{name}"] = {m: paired_difference(last[m], other[m]) for m in METRICS
                                     if m in last and m in other}
    return out


def comparison_lines(comps: dict[str, Any], iteration: int, scored: bool = True) -> list[str]:
    """report.md's table: iteration N minus each other sampler, with the paired 95% CI (demo solved
    "not scored" when no demo task has test outputs)."""
    def cell(d: dict[str, Any] | None, digits: int) -> str:
        if not d:
            return "–"
        if d["ci95"] is None:
            return f"{d['mean']:+.{digits}f}"
        lo, hi = d["ci95"]
        mark = " **>0**" if lo > 0 else (" **<0**" if hi < 0 else "")
        return f"{d['mean']:+.{digits}f} [{lo:+.{digits}f}, {hi:+.{digits}f}]{mark}"

    def rank(key: str) -> int:
        name = key.removeprefix("last_minus_")
        return list(AGAINST).index(name) if name in AGAINST else len(AGAINST)

    columns = {"solved_seeds": ("demo solved", 2), "heldout_solved_seeds": ("held-out solved", 2),
               "hit_rate_seeds": ("demo hit rate", 4), "heldout_hit_rate_seeds": ("held-out hit rate", 4)}
    if not any("heldout_solved_seeds" in comp for comp in comps.values()):  # no held-out tasks: no columns
        columns = {k: v for k, v in columns.items() if not k.startswith("heldout_")}
    lines = [f"| iteration {iteration} minus | " + " | ".join(title for title, _ in columns.values()) + " |",
             "|---" * (len(columns) + 1) + "|"]
    for key, comp in sorted(comps.items(), key=lambda kv: rank(kv[0])):
        name = AGAINST.get(key.removeprefix("last_minus_"), key)
        cells = [cell(comp.get(m), d) if scored or m != "solved_seeds" else "not scored" for m, (_, d) in columns.items()]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines
