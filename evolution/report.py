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

from evolution import metrics  # noqa: E402
from evolution.attempts import file_stem, write_attempts  # noqa: E402
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
    verdict = " — not scored (no test outputs)" if solved is None else f" — solved {solved:.2f}"
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
    if not has_heldout(rows, baselines):  # no held-out tasks: no held-out panels
        panels = [p for p in panels if not p[0].startswith("heldout_")]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.75 * len(panels), 3.4))
    its = [r["iteration"] for r in rows]
    for ax, (key, title, unit) in zip(axes, panels, strict=True):
        stats = [_mean_std(r.get(key) or [r.get("solved" if "solved" in key else "hit_rate") or 0.0]) for r in rows]
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


def has_heldout(entries: list[dict[str, Any]], baselines: dict[str, Any] | None = None) -> bool:
    """Whether any sampler was measured on held-out tasks (without them, measure leaves the fields out)."""
    return any("heldout_solved_seeds" in m for m in [*entries, *(baselines or {}).values()])


def comparison_table(entries: list[dict[str, Any]], baselines: dict[str, Any] | None, scored: bool = True) -> list[str]:
    """Every sampler's measurement; held-out columns only when there are held-out tasks, and the
    demo tasks' solved as "not scored" when none of them has test outputs."""
    heldout = has_heldout(entries, baselines)
    lines = ["| sampler | demo solved | held-out solved | demo hit rate | held-out hit rate |" if heldout else
             "| sampler | demo solved | demo hit rate |", "|---|---|---|---|---|" if heldout else "|---|---|---|"]
    for label, m in comparison_rows(entries, baselines):
        cells = [_fmt(m.get("solved_seeds")) if scored else "not scored", _fmt(m.get("heldout_solved_seeds")),
                 _fmt(m.get("hit_rate_seeds"), 4), _fmt(m.get("heldout_hit_rate_seeds"), 4)]
        lines.append(f"| {label} | " + " | ".join(cells if heldout else cells[::2]) + " |")
    return lines


def _solved_cell(value: float | None) -> str:
    return "not scored" if value is None else f"{value:.2f}"


def task_table(tasks: dict[str, ArcTask], rows: list[dict[str, Any]], files: dict[str, str]) -> list[str]:
    """The last search per task: solved (or "not scored": no test outputs), and its attempts file."""
    lines = ["| task | solved (pass@2) | oracle | programs | fully correct programs | attempts |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        tid = r["task_id"]
        lines.append(f"| {tid} | {_solved_cell(r['solved'])} | {_solved_cell(r['oracle'])} | {r['programs']} | "
                     f"{r['fully_correct_programs']} | [{files[tid]}]({files[tid]}) |")
    return lines if tasks else []


def search_lines(entries: list[dict[str, Any]], seed: int) -> list[str]:
    """The searches table: a task without test outputs counts in `tasks`, never in solved."""
    lines = [f"## Searches (sampling seed {seed}, the programs hindsight learns from)", "",
             "| iteration | model | tasks | solved (pass@2) | oracle | programs | hit rate | sampler busy | wall s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for e in entries:
        hit = e.get("search_hit_rate", e["hit_rate"])
        n, scored = e["tasks"], metrics.scored(e)
        tasks = f"{n} ({n - scored} not scored)" if scored < n else str(n)
        lines.append(f"| {e['iteration']} | {e['model_version']} | {tasks} | {_solved_cell(e['solved'])} | "
                     f"{_solved_cell(e['oracle'])} | {e['programs']} | {hit:.4f} | {e['sampler_busy_frac']:.2f} | "
                     f"{e['wall_s']} |")
    return lines


def write_outputs(cfg: SoarConfig, run_dir: Path, tasks: dict[str, ArcTask], results: list[Any],
                  baselines: dict[str, Any] | None = None) -> dict[str, Any]:
    """metrics.jsonl, summary.json, report.md, plots and attempts/ from the searches so far (SearchResults)."""
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
    last = results[-1]
    scored = metrics.scored(last.entry)
    if scored:  # tasks without test outputs add nothing to a curve of tasks solved
        plot_curve({f"it{e['iteration']} ({e['model_version']})": [(p["n"], p["solved"], p["oracle"])
                                                                   for p in e["curve"]] for e in entries},
                   scored, run_dir / "curve.png", f"{cfg.experiment}: solved vs programs tried")
    measured = any("solved_seeds" in e for e in entries)
    if len(entries) > 1 or measured:
        plot_iterations(entries, run_dir / "iterations.png", baselines)
    files = write_attempts(run_dir, tasks, last.outcomes, last.entry, cfg.filters, cfg.vote)
    shown = []
    for tid in list(tasks)[: cfg.render_tasks]:
        solved = next(r["solved"] for r in last.rows if r["task_id"] == tid)
        render_task(tasks[tid], last.outcomes[tid].attempts, run_dir / f"task-{file_stem(tid)}.png", solved)
        shown.append(tid)
    # first the paired differences that answer "did it learn, beyond what control?", then the detail
    lines = [f"# SOAR: {cfg.experiment}"]
    if comps:
        lines += ["", "## Did it learn? Paired differences", "",
                  "The last iteration's model minus each other sampler, seed by seed: mean and 95% CI "
                  "(t interval over the paired differences). **>0** marks an interval above zero.", ""]
        lines += comparison_lines(comps, entries[-1]["iteration"], scored=bool(scored))
    if measured or baselines:
        held = " Held-out tasks never enter training." if has_heldout(entries, baselines) else ""
        unscored = (f" Demo solved counts only the {scored} of {len(tasks)} tasks that have test outputs."
                    if 0 < scored < len(tasks) else "")
        lines += ["", "## Models against controls", "",
                  f"Same search and budget for every sampler; mean ± standard deviation over sampling seeds "
                  f"{cfg.controls.seeds} (values in brackets).{held}{unscored}", ""]
        lines += comparison_table(entries, baselines, scored=bool(scored))
    mixes = mix_lines(baselines or {})
    if mixes:
        lines += ["", "## Several models in one search", "",
                  "Each batch from one model (the rule), every model's programs in the vote; shares pooled over "
                  "the sampling seeds of each split (a search resumed from the store adds none).", ""] + mixes
    lines += ["", *search_lines(entries, cfg.search.seed), ""]
    lines += ["## Tasks (the last search)", "",
              "A task without test outputs is searched and voted on, but not scored. Each task's two attempts "
              "per test input, with the programs behind them: its attempts file.", ""]
    lines += task_table(tasks, last.rows, files) + [""]
    if scored:
        lines += ["![solved vs programs](curve.png)", ""]
    if len(entries) > 1 or measured:
        lines += ["![iterations](iterations.png)", ""]
    lines += [f"![{t}](task-{file_stem(t)}.png)" for t in shown]
    lines += ["", "Config: [config.yaml](config.yaml) · per-task rows: [metrics.jsonl](metrics.jsonl) · "
              "numbers: [summary.json](summary.json)", ""]
    (run_dir / "report.md").write_text("\n".join(lines))
    return summary
