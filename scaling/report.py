"""What a scaling run writes: pool.npz, candidates.jsonl, curves.csv, heatmap.csv, the plots, and report.md."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common.jsonio import dumps
from scaling.curves import LABELS, Curves, plot_curves
from search.scored_pool import ScoredPool

if TYPE_CHECKING:
    from scaling.config import ScalingConfig

# every candidate's text, extracted answer and correctness, beside pool.npz (which keeps none of them)
CANDIDATES_FILE = "candidates.jsonl"


def write_outputs(run_dir: Path, curves: Curves, pool: ScoredPool) -> None:
    """pool.npz, curves.csv, heatmap.csv and the plots."""
    pool.save(run_dir / "pool.npz")
    curves.write_csv(run_dir / "curves.csv")
    grid = curves.heatmap()
    lines = ["k_inf," + ",".join(f"k_verif={v}" for v in curves.k_verif_values)]
    lines += [f"{k}," + ",".join(f"{x:.4f}" for x in row) for k, row in zip(curves.k_values, grid, strict=True)]
    (run_dir / "heatmap.csv").write_text("\n".join(lines) + "\n")
    plot_curves(curves, run_dir)


def report(cfg: ScalingConfig, summary: dict[str, Any]) -> str:
    out = [f"# {cfg.experiment}: sampling-based search with self-verification\n"]
    if summary.get("verifier", "self") != "self":
        out.append(f"Candidates from {summary.get('model', cfg.model)}; verdicts and comparisons from the verifier "
                   f"{cfg.verifier} ({summary['verifier']}).\n")
    if "curves" in summary:
        p = summary["pool"]
        out.append(f"{p['questions']} questions x {p['k_inf']} candidates x {p['k_verif']} verdicts; "
                   f"{summary['ambiguous_questions']} ambiguous questions (a correct candidate, and full-pool "
                   "majority vote gets them wrong; each point counts the draws of k that hold a correct one). "
                   f"Each point: mean over {cfg.curves.seeds} subsamples; 95% bootstrap CI over questions. "
                   f"Unparsable: {summary['unparsable']['verdicts']:.1%} of verdicts, "
                   f"{summary['unparsable']['comparisons']:.1%} of stored comparisons.\n")
        out += _own_verification(cfg, summary.get("own_verification") or {})
        out += ["\n## Does verification beat majority voting? Paired differences, largest k\n",
                "Same resampled questions on both sides; the control is Consistency@k (majority vote).\n",
                "| strategy - baseline | k | k_verif | difference | 95% CI |", "|---|---|---|---|---|"]
        last = max((d["k"] for d in summary["differences"]), default=None)
        out += [_difference_row(d) for d in summary["differences"] if d["k"] == last]
        if len({d["k"] for d in summary["differences"]}) > 1:
            out += ["\n### At every k\n", "| strategy - baseline | k | k_verif | difference | 95% CI |",
                    "|---|---|---|---|---|"]
            out += [_difference_row(d) for d in sorted(summary["differences"], key=lambda d: (d["strategy"], d["k"]))]
        out += _implicit_scaling(summary.get("curves_ambiguous", {}))
        for key, title in (("curves", "All questions"), ("curves_ambiguous", "Ambiguous questions")):
            out += [f"\n## {title}, largest k\n", "| strategy | k | accuracy | 95% CI |", "|---|---|---|---|"]
            for s, rows in summary[key].items():
                if rows:
                    r = rows[-1]
                    out.append(f"| {LABELS.get(s, s)} | {r['k']} | {r['accuracy']:.3f} | "
                               f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}] |")
        amb = summary.get("heatmap_ambiguous", {}).get("accuracy")
        if amb:
            row = ", ".join(f"{kv}: {x:.3f}" for kv, x in zip(summary["heatmap_ambiguous"]["k_verif_values"],
                                                               amb[-1], strict=True) if x is not None)
            out.append(f"\nVerification@{summary['heatmap_ambiguous']['k_values'][-1]} on ambiguous draws by "
                       f"k_verif (implicit scaling): {row}\n")
        out.append("\n![heatmap](heatmap.png)\n\n![curves](curves.png)\n\n![ambiguous](curves_ambiguous.png)\n")
        out.append("Tables: [curves.csv](curves.csv), [heatmap.csv](heatmap.csv), [summary.json](summary.json); "
                   f"every candidate's text, answer and verdict of correctness: [{CANDIDATES_FILE}]({CANDIDATES_FILE}).\n")
    if "verification_benchmark" in summary:
        b = summary["verification_benchmark"]
        out += ["\n## Verification benchmark\n", "| measure | value |", "|---|---|"]
        out += [f"| {k} | {v:.3f} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in b.items()]
    out.append("\nResolved config: [config.yaml](config.yaml).\n")
    return "\n".join(out)


def _figure(x: Any) -> str | None:
    """`x` to 3 decimals; None for a figure with no value (NaN here, null in summary.json)."""
    return f"{x:.3f}" if isinstance(x, int | float) and math.isfinite(x) else None


def _own_verification(cfg: ScalingConfig, own: dict[str, Any]) -> list[str]:
    """The verdicts on the pool's own candidates. A ratio or AUC over no correct (or no wrong)
    candidates has no value: the report says what it lacks instead of printing nan."""
    if not own:
        return []
    n_ok, n_bad, mixed = own["correct_candidates"], own["wrong_candidates"], own["mixed_questions"]
    why = ("no correct candidates" if not n_ok else "no wrong candidates" if not n_bad
           else "no question has both a correct and a wrong candidate")
    on_ok = (f"1 on {own['on_correct']:.3f} of the verdicts on correct ones ({n_ok})" if n_ok
             else "on correct ones not measured: no correct candidates")
    on_bad = (f"0 on {own['on_wrong']:.3f} of the verdicts on wrong ones ({n_bad})" if n_bad
              else "on wrong ones not measured: no wrong candidates")
    out = [f"Verdicts on the pool's own candidates: {on_ok}; {on_bad}.\n"]
    pooled = _figure(own.get("pooled_auc"))
    pooled = (f"; the mean verdict over all candidates pooled {pooled} (it also rewards knowing which questions "
              "are hard, which does not help selection)" if pooled else "")
    if "within_question_auc" in own and mixed:
        out.append(f"Ranking one question's correct candidates above its wrong ones (AUC over the {mixed} "
                   f"questions that have both): mean verdict {own['within_question_auc']:.3f}, votes of the "
                   f"candidate's answer (what majority voting uses) {own['answer_frequency_auc']:.3f}{pooled}.\n")
    elif "within_question_auc" in own:
        out.append(f"Ranking one question's correct candidates above its wrong ones (AUC): not measured: "
                   f"{why}{pooled}.\n")
    if "within_question_auc_probability" in own:
        figures = {"within-question AUC": own["within_question_auc_probability"] if mixed else None,
                   "pooled AUC": own.get("pooled_auc_probability"),
                   "mean probability on correct candidates": own.get("probability_on_correct"),
                   "mean probability on wrong ones": own.get("probability_on_wrong")}
        shown = [f"{name} {_figure(x)}" for name, x in figures.items() if _figure(x)]
        lacking = [name for name, x in figures.items() if not _figure(x)]
        if lacking:
            shown.append(f"not measured ({why}): {', '.join(lacking)}")
        out.append(f"By the verdicts' mean probability of 1 (verdict={cfg.verdict}): {'; '.join(shown)}. "
                   f"Verification@k scores by {cfg.curves.options.score}.\n")
    return out


def write_candidates(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """candidates.jsonl: one candidate a line, as ScalingSampler.candidate_rows gives them."""
    with path.open("w") as f:
        f.writelines(dumps(row) + "\n" for row in rows)


def _difference_row(d: dict[str, Any]) -> str:
    return (f"| {LABELS.get(d['strategy'], d['strategy'])} - {LABELS.get(d['baseline'], d['baseline'])} | {d['k']} | "
            f"{d['k_verif']} | {d['difference']:+.3f} | [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}] |")


IMPLICIT = ("verification", "consistency", "pass")  # the ambiguous curves the implicit-scaling table shows


def _implicit_scaling(ambiguous: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Accuracy on ambiguous draws at every k: the paper's implicit scaling is Verification@k
    rising with k there (more candidates, and the verifier still finds the right one)."""
    shown = [s for s in IMPLICIT if ambiguous.get(s)]
    if not shown:
        return []
    ks = [r["k"] for r in ambiguous[shown[0]]]
    out = ["\n## Implicit scaling: accuracy on ambiguous draws at every k\n",
           "| k | " + " | ".join(LABELS.get(s, s) for s in shown) + " |", "|---" * (len(shown) + 1) + "|"]
    for i, k in enumerate(ks):
        cells = [f"{ambiguous[s][i]['accuracy']:.3f}" if i < len(ambiguous[s]) else "" for s in shown]
        out.append(f"| {k} | " + " | ".join(cells) + " |")
    return out
