"""The SOAR job's outputs: metrics.jsonl, summary.json, report.md and its plots.

Written after every search, so a run killed later keeps everything measured so far.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

from common.jsonio import dumps, write_json

matplotlib.use("Agg")  # no display on servers and in CI
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402

from evolution.comparisons import comparison_lines, comparisons  # noqa: E402
from evolution.config import SoarConfig  # noqa: E402
from verifiers.arc.grids import ArcTask, Grid  # noqa: E402

ARC_COLOURS = ListedColormap([
    "#000000", "#0074D9", "#FF4136", "#2ECC40", "#FFDC00",
    "#AAAAAA", "#F012BE", "#FF851B", "#7FDBFF", "#870C25",
])


def plot_curve(points: dict[str, list[tuple[int, float, float]]], tasks: int, path: Path, title: str) -> None:
    """Tasks solved (pass@2 and oracle) against programs tried per task, one line pair per series."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, (label, pts) in enumerate(points.items()):
        n = [p[0] for p in pts]
        colour = f"C{i}"
        ax.plot(n, [p[1] for p in pts], "-o", color=colour, label=f"{label} pass@2")
        ax.plot(n, [p[2] for p in pts], "--", color=colour, alpha=0.6, label=f"{label} oracle")
    ax.set_xscale("log", base=2)
    ns = sorted({p[0] for pts in points.values() for p in pts})
    if ns:  # the budgets measured, as numbers (not 2^n)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.minorticks_off()
    ax.set_xlabel("programs tried per task")
    ax.set_ylabel(f"tasks solved (of {tasks})")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _draw(ax, grid: Grid | None, title: str) -> None:
    ax.set_title(title, fontsize=7)
    ax.set_xticks([])
    ax.set_yticks([])
    if grid is None:
        ax.text(0.5, 0.5, "none", ha="center", va="center", fontsize=7)
        return
    ax.imshow(grid, cmap=ARC_COLOURS, vmin=0, vmax=9)


def render_task(task: ArcTask, attempts: Sequence[Sequence[Grid]], path: Path, solved: float | None) -> None:
    """Train pairs, then each test input with its expected output and the two attempts."""
    rows = len(task.train) + len(task.test)
    fig, axes = plt.subplots(rows, 4, figsize=(6, 1.5 * rows), squeeze=False)
    for r, ex in enumerate(task.train):
        _draw(axes[r][0], ex.input, f"train {r + 1} in")
        _draw(axes[r][1], ex.output, "out")
        axes[r][2].axis("off")
        axes[r][3].axis("off")
    for k, ex in enumerate(task.test):
        r = len(task.train) + k
        tries = list(attempts[k]) if k < len(attempts) else []
        _draw(axes[r][0], ex.input, f"test {k + 1} in")
        _draw(axes[r][1], ex.output, "expected")
        _draw(axes[r][2], tries[0] if tries else None, "attempt 1")
        _draw(axes[r][3], tries[1] if len(tries) > 1 else None, "attempt 2")
    verdict = "" if solved is None else f" — solved {solved:.2f}"
    fig.suptitle(f"{task.id}{verdict}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def plot_iterations(rows: list[dict], path: Path, baselines: dict[str, dict] | None = None) -> None:
    """Solved tasks and fully-correct program rate per iteration, demo and held-out tasks,
    mean and standard deviation over sampling seeds; controls as horizontal bands."""
    panels = [("solved_seeds", "demo tasks solved", "tasks (pass@2)"),
              ("heldout_solved_seeds", "held-out tasks solved", "tasks (pass@2)"),
              ("hit_rate_seeds", "demo: correct-program rate", "fraction of programs drawn"),
              ("heldout_hit_rate_seeds", "held-out: correct-program rate", "fraction of programs drawn")]
    fig, axes = plt.subplots(1, 4, figsize=(15, 3.4))
    its = [r["iteration"] for r in rows]
    for ax, (key, title, unit) in zip(axes, panels, strict=True):
        stats = [_mean_std(r.get(key) or [r.get("solved" if "solved" in key else "hit_rate", 0.0)]) for r in rows]
        ax.errorbar(its, [m for m, _ in stats], yerr=[sd for _, sd in stats], fmt="-o", capsize=3, label="SOAR iterations")
        for i, (name, b) in enumerate((baselines or {}).items(), 1):
            if key in b:
                m, sd = _mean_std(b[key])
                ax.axhline(m, color=f"C{i}", ls="--", label=name.replace("_", " "))
                ax.axhspan(m - sd, m + sd, color=f"C{i}", alpha=0.12)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("iteration (SFT rounds)")
        ax.set_ylabel(unit)
        ax.set_xticks(its)  # iterations are whole: no 0.25 ticks
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


CONTROL_NAMES = {"random_prior": "random-program prior (no model)",
                 "seed_only_control": "seed-only control (seed + same SFT steps on seed data)",
                 "model_mix_thompson": "model mix (Thompson bandit)", "model_mix_uniform": "model mix (uniform split)"}


def mix_lines(baselines: dict[str, Any]) -> list[str]:
    """Each model's share of a mix's programs and of its right ones, per rule and split."""
    lines = ["| mix | split | model | budget share | right-program share | programs |", "|---|---|---|---|---|---|"]
    for b in baselines.values():
        for split, models in b.get("shares", {}).items():
            for model, sh in models.items():
                lines.append(f"| {b['rule']} | {split} | {model} | {sh['budget_share']:.3f} | {sh['right_share']:.3f} | "
                             f"{sh['programs']} |")
    return lines if len(lines) > 2 else []


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


def write_outputs(cfg: SoarConfig, run_dir: Path, tasks: dict[str, ArcTask], results: list[Any],
                  baselines: dict[str, Any] | None = None) -> dict[str, Any]:
    """metrics.jsonl, summary.json, report.md and plots from the searches so far (SearchResults)."""
    entries = [r.entry for r in results]
    with open(run_dir / "metrics.jsonl", "w") as f:
        for r in results:
            for row in r.rows:
                f.write(dumps(row) + "\n")
    summary = {"experiment": cfg.experiment, "iterations": entries}
    if baselines:
        summary["baselines"] = baselines
    comps = comparisons(entries, baselines)
    if comps:
        summary["comparisons"] = comps
    write_json(run_dir / "summary.json", summary)
    plot_curve({f"it{e['iteration']} ({e['model_version']})": [(p["n"], p["solved"], p["oracle"]) for p in e["curve"]]
                for e in entries}, len(tasks), run_dir / "curve.png", f"{cfg.experiment}: solved vs programs tried")
    measured = any("solved_seeds" in e for e in entries)
    if len(entries) > 1 or measured:
        plot_iterations(entries, run_dir / "iterations.png", baselines)
    last = results[-1]
    shown = []
    for tid in list(tasks)[: cfg.render_tasks]:
        out = last.outcomes[tid]
        solved = next(r["solved"] for r in last.rows if r["task_id"] == tid)
        render_task(tasks[tid], out.attempts, run_dir / f"task-{tid}.png", solved)
        shown.append(tid)
    # first the paired differences that answer "did it learn, beyond what control?", then the detail
    lines = [f"# SOAR: {cfg.experiment}"]
    if comps:
        lines += ["", "## Did it learn? Paired differences", "",
                  "The last iteration's model minus each other sampler, seed by seed: mean and 95% CI "
                  "(t interval over the paired differences). **>0** marks an interval above zero.", ""]
        lines += comparison_lines(comps, entries[-1]["iteration"])
    if measured or baselines:
        lines += ["", "## Models against controls", "",
                  f"Same search and budget for every sampler; mean ± standard deviation over sampling seeds "
                  f"{cfg.controls.seeds} (values in brackets). Held-out tasks never enter training.", ""]
        lines += comparison_table(entries, baselines)
    mixes = mix_lines(baselines or {})
    if mixes:
        lines += ["", "## Several models in one search", "",
                  "Each batch from one model (the rule), every model's programs in the vote; shares pooled over "
                  "the sampling seeds of each split (a search resumed from the store adds none).", ""] + mixes
    lines += ["", f"## Searches (sampling seed {cfg.search.seed}, the programs hindsight learns from)", "",
              "| iteration | model | tasks | solved (pass@2) | oracle | programs | hit rate | sampler busy | wall s |",
              "|---|---|---|---|---|---|---|---|---|"]
    for e in entries:
        hit = e.get("search_hit_rate", e["hit_rate"])
        lines.append(f"| {e['iteration']} | {e['model_version']} | {e['tasks']} | {e['solved']:.2f} | {e['oracle']:.2f} | "
                     f"{e['programs']} | {hit:.4f} | {e['sampler_busy_frac']:.2f} | {e['wall_s']} |")
    lines += ["", "![solved vs programs](curve.png)", ""]
    if len(entries) > 1 or measured:
        lines += ["![iterations](iterations.png)", ""]
    lines += [f"![{t}](task-{t}.png)" for t in shown]
    lines += ["", "Config: [config.yaml](config.yaml) · per-task rows: [metrics.jsonl](metrics.jsonl) · "
              "numbers: [summary.json](summary.json)", ""]
    (run_dir / "report.md").write_text("\n".join(lines))
    return summary
