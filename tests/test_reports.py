"""Reports a reader can take in: plots with whole-number iteration ticks and axis labels with
units, and a report.md that opens with the table answering "did it learn, against what control?"."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402


@pytest.fixture
def saved(monkeypatch):
    """The figures the report code saves, kept open for inspection."""
    figures: list[Figure] = []
    original = Figure.savefig

    def keep(self, *args, **kwargs):
        figures.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return figures


def whole_ticks(ax) -> bool:
    lo, hi = ax.get_xlim()
    shown = [t for t in ax.get_xticks() if lo <= t <= hi]
    return bool(shown) and all(float(t).is_integer() for t in shown)


def tpo_summary() -> dict:
    def entry(it: int, acc: float) -> dict:
        return {"iteration": it, "model_version": f"v{it}", "accuracy": acc, "accuracy_seeds": [acc - 0.01, acc + 0.01],
                "win_rate_vs_seed": acc, "win_rate_vs_seed_seeds": [acc - 0.02, acc + 0.02], "score": acc}

    return {"experiment": "t", "judge": "programmatic", "heldout": 32, "seeds": [0, 1],
            "iterations": [entry(0, 0.598), entry(1, 0.693), entry(2, 0.694)],
            "baselines": {"direct": [entry(0, 0.380), entry(1, 0.388), entry(2, 0.387)]}}


def test_tpo_plot_ticks_whole_iterations_and_labels_units(saved, tmp_path):
    from thinking.report import plot

    plot(tpo_summary(), tmp_path / "iterations.png", "win_rate_vs_seed")
    (ax,) = saved[-1].axes
    assert whole_ticks(ax), list(ax.get_xticks())  # was 0, 0.25, 0.5, ... 2
    assert "fraction" in ax.get_ylabel() and "iteration" in ax.get_xlabel()


def test_tpo_report_opens_with_did_it_learn_against_the_direct_baseline(tmp_path):
    from thinking.report import write

    write(tmp_path, tpo_summary())
    report = (tmp_path / "report.md").read_text()
    assert report.index("## Did it learn?") < report.index("## TPO (thought prompt)")
    assert "| TPO (thought) | 0.598 (it 0) | 0.694 (it 2) | +0.096 |" in report
    assert "| direct baseline, trained the same way | 0.380 (it 0) | 0.387 (it 2) | +0.007 |" in report


def test_soar_iterations_plot_ticks_whole_iterations_and_labels_units(saved, tmp_path):
    from evolution.report import plot_iterations

    rows = [{"iteration": i, "model_version": f"v{i}", "solved_seeds": [7, 8], "heldout_solved_seeds": [8, 9],
             "hit_rate_seeds": [0.012, 0.013], "heldout_hit_rate_seeds": [0.028, 0.029]} for i in range(3)]
    plot_iterations(rows, tmp_path / "iterations.png", {"random_prior": rows[0]})
    axes = saved[-1].axes
    assert len(axes) == 4 and all(whole_ticks(ax) for ax in axes)
    assert [ax.get_ylabel() for ax in axes] == ["tasks (pass@2)", "tasks (pass@2)", "fraction of programs drawn",
                                                "fraction of programs drawn"]
