"""The SOAR job's outputs: metrics.jsonl, summary.json, report.md and its plots.

Written after every search, so a run killed later keeps everything measured so far.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

CONTROL_NAMES = {"random_prior": "random-program prior (no model)",
                 "seed_only_control": "seed-only control (seed + same SFT steps on seed data)"}


def _fmt(values: Sequence[float] | None, digits: int = 1) -> str:
    """mean ± sample std over seeds, with the values: `8.3 ± 0.6 (8, 9, 8)`."""
    if not values:
        return "–"
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    each = ", ".join(f"{v:g}" if digits == 1 else f"{v:.{digits}f}" for v in values)
    return f"{mean:.{digits}f} ± {sd:.{digits}f} ({each})"


def comparison_rows(entries: list[dict[str, Any]], baselines: dict[str, Any] | None) -> list[tuple[str, dict]]:
    """(label, measurement) for the seed model, each iteration's model and each control."""
    rows = []
    for e in entries:
        label = "seed model (iteration 0)" if e["iteration"] == 0 else f"iteration {e['iteration']}"
        rows.append((f"{label}, {e['model_version']}", e))
    for name, b in (baselines or {}).items():
        rows.append((CONTROL_NAMES.get(name, name), b))
    return rows


def comparison_table(entries: list[dict[str, Any]], baselines: dict[str, Any] | None) -> list[str]:
    lines = ["| sampler | demo solved | held-out solved | demo hit rate | held-out hit rate |",
             "|---|---|---|---|---|"]
    for label, m in comparison_rows(entries, baselines):
        lines.append(f"| {label} | {_fmt(m.get('solved_seeds'))} | {_fmt(m.get('heldout_solved_seeds'))} | "
                     f"{_fmt(m.get('hit_rate_seeds'), 4)} | {_fmt(m.get('heldout_hit_rate_seeds'), 4)} |")
    return lines


def write_outputs(cfg, run_dir: Path, tasks, results: list[dict[str, Any]],
                  baselines: dict[str, Any] | None = None) -> dict[str, Any]:
    from evolution.report import plot_curve, plot_iterations, render_task

    entries = [r["entry"] for r in results]
    with open(run_dir / "metrics.jsonl", "w") as f:
        for r in results:
            for row in r["rows"]:
                f.write(json.dumps(row) + "\n")
    summary = {"experiment": cfg.experiment, "iterations": entries}
    if baselines:
        summary["baselines"] = baselines
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    plot_curve({f"it{e['iteration']} ({e['model_version']})": [(p["n"], p["solved"], p["oracle"]) for p in e["curve"]]
                for e in entries}, len(tasks), run_dir / "curve.png", f"{cfg.experiment}: solved vs programs tried")
    measured = any("solved_seeds" in e for e in entries)
    if len(entries) > 1 or measured:
        plot_iterations(entries, run_dir / "iterations.png", baselines)
    last = results[-1]
    shown = []
    for tid in list(tasks)[: cfg.render_tasks]:
        out = last["outcomes"][tid]
        solved = next(r["solved"] for r in last["rows"] if r["task_id"] == tid)
        render_task(tasks[tid], out.attempts, run_dir / f"task-{tid}.png", solved)
        shown.append(tid)
    lines = [f"# SOAR: {cfg.experiment}", "", "## Searches (sampling seed "
             f"{cfg.search.seed}, the programs hindsight learns from)", "",
             "| iteration | model | tasks | solved (pass@2) | oracle | programs | hit rate | sampler busy | wall s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for e in entries:
        hit = e.get("search_hit_rate", e["hit_rate"])
        lines.append(f"| {e['iteration']} | {e['model_version']} | {e['tasks']} | {e['solved']:.2f} | {e['oracle']:.2f} | "
                     f"{e['programs']} | {hit:.4f} | {e['sampler_busy_frac']:.2f} | {e['wall_s']} |")
    if measured or baselines:
        lines += ["", "## Models against controls", "",
                  f"Same search and budget for every sampler; mean ± standard deviation over sampling seeds "
                  f"{cfg.controls.seeds} (values in brackets). Held-out tasks never enter training.", ""]
        lines += comparison_table(entries, baselines)
    lines += ["", "![solved vs programs](curve.png)", ""]
    if len(entries) > 1 or measured:
        lines += ["![iterations](iterations.png)", ""]
    lines += [f"![{t}](task-{t}.png)" for t in shown]
    lines += ["", "Config: [config.yaml](config.yaml) · per-task rows: [metrics.jsonl](metrics.jsonl) · "
              "numbers: [summary.json](summary.json)", ""]
    (run_dir / "report.md").write_text("\n".join(lines))
    return summary
