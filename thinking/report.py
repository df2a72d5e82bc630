"""summary.json, report.md and the per-iteration plot of a TPO run.

summary.json (the contract):
  iterations: one entry per iteration of the thought arm (0 = the seed with the thought prompt):
    iteration, model_version, score (mean judged score on held-out instructions),
    win_rate_vs_seed (against the seed answering directly, same instruction and sampling seed;
    a tie counts half), win_rate_vs_direct (against the direct arm at the same iteration),
    accuracy (share of judged-correct responses: programmatic judge only), thought_len and
    response_len (mean characters), unparsable_rate, rho, pairs, wall_s (sample+judge+train of
    the step that produced this version), measure_s; from iteration 1, when this run switched
    the samplers to the version: switch_s and weight_sync (memory or disk: the path the switch
    took, sampler.weight_sync), with weight_sync_note saying why when it fell back to disk; each
    figure is the mean over the sampling seeds, with the per-seed values in `<name>_seeds`.
  baselines.direct: the same fields for the direct-response arm (no win_rate_vs_direct).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from common.jsonio import write_json
from thinking.pairs import Sample

PER_SEED = ("score", "win_rate_vs_seed", "win_rate_vs_direct", "accuracy", "thought_len", "response_len",
            "unparsable_rate")


def _score(s: Sample) -> float:
    return s.score if s.score is not None else float("-inf")  # a failed verdict loses every comparison


def win_rate(mine: list[Sample], theirs: list[Sample]) -> float:
    wins = [1.0 if _score(a) > _score(b) else 0.5 if _score(a) == _score(b) else 0.0
            for a, b in zip(mine, theirs, strict=True)]
    return float(np.mean(wins))


def seed_figures(samples: list[Sample], reference: list[Sample], direct: list[Sample] | None,
                 binary: bool, absolute: bool = True) -> dict[str, float | None]:
    """One sampling seed's figures. `absolute`: the judge's scores compare across calls (a
    comparative judge's do not: its score, accuracy and score-based win rates are left out)."""
    scores = [s.score for s in samples if s.score is not None]
    return {
        "score": float(np.mean(scores)) if scores and absolute else None,
        "win_rate_vs_seed": win_rate(samples, reference) if absolute else None,
        "win_rate_vs_direct": win_rate(samples, direct) if direct is not None and absolute else None,
        "accuracy": float(np.mean([s.score == 1.0 for s in samples])) if binary and absolute else None,
        "thought_len": float(np.mean([len(s.thought) for s in samples])),
        "response_len": float(np.mean([len(s.response) for s in samples])),
        "unparsable_rate": float(np.mean([not s.parsed for s in samples])),
    }


def iteration_entry(iteration: int, info: dict[str, Any], measured: dict[int, list[Sample]],
                    reference: dict[int, list[Sample]], direct: dict[int, list[Sample]] | None, *,
                    wins: dict[str, dict[int, float]] | None = None, absolute: bool = True) -> dict[str, Any]:
    """`wins`: win rates judged head to head per seed (a comparative judge's), used instead of
    comparing scores; `absolute=False` leaves out what such a judge cannot fill (score, accuracy)."""
    binary = all(s.score in (0.0, 1.0, None) for v in measured.values() for s in v)
    per_seed = {seed: seed_figures(samples, reference[seed], direct[seed] if direct else None, binary, absolute)
                for seed, samples in measured.items()}
    for name, by_seed in (wins or {}).items():
        for seed, value in by_seed.items():
            per_seed[seed][name] = value
    entry: dict[str, Any] = {"iteration": iteration, "model_version": info.get("model_version")}
    for name in PER_SEED:
        values = [f[name] for f in per_seed.values()]
        if any(v is None for v in values):
            entry[name] = None
            continue
        entry[name] = float(np.mean(values))
        entry[f"{name}_seeds"] = values
        entry[f"{name}_spread"] = float(np.max(values) - np.min(values))
    entry |= {"seeds": list(measured), "rho": info.get("rho"), "pairs": info.get("pairs"),
              "pair_counts": info.get("pair_counts"), "wall_s": info.get("wall_s"),
              "train_s": info.get("train_s"), "measure_s": info.get("measure_s")}
    entry |= {k: info[k] for k in ("switch_s", "weight_sync", "weight_sync_note") if k in info}
    return entry


def _fmt(x: Any) -> str:
    return "-" if x is None else f"{x:.3f}" if isinstance(x, float) else str(x)


METRIC_LABELS = {"win_rate_vs_seed": "win rate vs the seed answering directly\n(fraction of instructions)",
                 "accuracy": "accuracy (fraction of instructions)"}


def opening_table(summary: dict[str, Any]) -> list[str]:
    """The table a reader opens the report for: did the thought arm learn, against the direct
    baseline trained the same way? First and last iteration of each arm, and the change."""
    metric = "accuracy" if (summary["iterations"] or [{}])[0].get("accuracy") is not None else "win_rate_vs_seed"
    rows = ["\n## Did it learn?\n", f"Held-out {metric.replace('_', ' ')}, mean over sampling seeds "
            f"{summary.get('seeds')}; the direct-answer baseline is the control.\n",
            "| arm | first iteration | last iteration | change |", "|---|---|---|---|"]
    for label, entries in (("TPO (thought)", summary["iterations"]),
                           ("direct baseline, trained the same way", summary["baselines"].get("direct", []))):
        if entries and entries[0].get(metric) is not None and entries[-1].get(metric) is not None:
            first, last = entries[0], entries[-1]
            rows.append(f"| {label} | {_fmt(first[metric])} (it {first['iteration']}) | {_fmt(last[metric])} "
                        f"(it {last['iteration']}) | {last[metric] - first[metric]:+.3f} |")
    return rows


def plot(summary: dict[str, Any], path: Path, metric: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    arms = [("TPO (thought)", summary["iterations"]), ("direct baseline", summary["baselines"].get("direct", []))]
    for label, entries in arms:
        if not entries or entries[0].get(metric) is None:
            continue
        xs = [e["iteration"] for e in entries]
        ys = [e[metric] for e in entries]
        lo = [min(e[f"{metric}_seeds"]) for e in entries]
        hi = [max(e[f"{metric}_seeds"]) for e in entries]
        ax.plot(xs, ys, marker="o", label=label)
        ax.fill_between(xs, lo, hi, alpha=0.2)
    ax.set_xlabel("iteration (DPO rounds)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # iterations are whole: no 0.25 ticks
    ax.set_ylabel(METRIC_LABELS.get(metric, metric.replace("_", " ")))
    ax.set_title("held-out instructions, mean and range over sampling seeds")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(run_dir: Path, summary: dict[str, Any]) -> None:
    write_json(run_dir / "summary.json", summary)
    metric = "win_rate_vs_seed"
    plot(summary, run_dir / "iterations.png", metric)
    cols = ["iteration", "model_version", "score", "win_rate_vs_seed", "win_rate_vs_direct", "accuracy",
            "thought_len", "response_len", "unparsable_rate", "rho", "pairs", "wall_s"]
    every = summary["iterations"] + summary["baselines"].get("direct", [])
    keep = ("iteration", "model_version")  # no column that no entry fills (a pairwise judge has no accuracy)
    cols = [c for c in cols if c in keep or any(e.get(c) is not None for e in every)]
    out = [f"# {summary.get('experiment', 'tpo')}: thought preference optimization\n",
           f"Judge: {summary.get('judge')}. Held-out instructions: {summary.get('heldout')}; "
           f"figures are means over sampling seeds {summary.get('seeds')} (per-seed values in summary.json).\n"]
    out += opening_table(summary)
    for title, entries in (("TPO (thought prompt)", summary["iterations"]),
                           ("Direct-response baseline", summary["baselines"].get("direct", []))):
        if not entries:
            continue
        out += [f"\n## {title}\n", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for e in entries:
            cells = [_fmt(e.get(c)) + (f" ±{e[c + '_spread'] / 2:.3f}" if c + "_spread" in e else "") for c in cols]
            out.append("| " + " | ".join(cells) + " |")
    out.append(f"\n![{metric} per iteration](iterations.png)\n")
    out.append("\n± is half the range across sampling seeds. Resolved config: [config.yaml](config.yaml).\n")
    (run_dir / "report.md").write_text("\n".join(out))
