"""Plots and tables for SOAR runs: solved-vs-programs curves and task renderings."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display on servers and in CI
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402

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


def plot_iterations(rows: list[dict], path: Path) -> None:
    """Solved tasks and correct-program rate per iteration (issue: learning curves)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(8, 3.2))
    its = [r["iteration"] for r in rows]
    a.plot(its, [r["solved"] for r in rows], "-o", label="pass@2")
    a.plot(its, [r["oracle"] for r in rows], "--o", label="oracle")
    a.set_xlabel("iteration")
    a.set_ylabel("tasks solved")
    a.legend(fontsize=8)
    b.plot(its, [r.get("hit_rate", 0.0) for r in rows], "-o", color="C2")
    b.set_xlabel("iteration")
    b.set_ylabel("fully-correct program rate")
    for ax in (a, b):
        ax.grid(alpha=0.3)
        ax.set_xticks(its)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
