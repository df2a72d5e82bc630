"""A user's own ARC tasks: task files (Kaggle's challenges and solutions), a `module:function`
source refused in one line at --dry-run when it cannot work, tasks without test outputs
reported as "not scored", and every task's attempts written as JSON."""

from __future__ import annotations

import json

import pytest
import ray
from _capture import own_lines

from common.config import load_config
from evolution.config import SoarConfig
from evolution.tasks import load_split
from jobs import runner
from ray_jobs import soar
from verifiers.arc.grids import GridError

SOURCE = "examples.arc_tasks:tasks"  # the one docs/configuration.md shows
UNKNOWN = "flip-answer-unknown"  # its task without a test output
UNREACHABLE = "redis://127.0.0.1:1/0"  # a dry run that touched the store would exit 1


def own_task_overrides(tmp_path, experiment: str) -> list[str]:
    """configs/soar-demo.yaml on the example's tasks, on the smallest budget that still votes."""
    return [f"experiment={experiment}", f"runs_dir={tmp_path}", f"tasks.split={SOURCE}", "tasks.ids=[]",
            "tasks.heldout_ids=[]", "search.samples_per_task=8", "search.refinements_per_task=4", "search.batch=4",
            "curve_budgets=[1,4,12]", "controls.seeds=[0]", "controls.random_prior=false", "controls.seed_only=false"]


def test_the_documented_task_source_runs_and_writes_every_tasks_attempts(ray_local, store, tmp_path,
                                                                          experiment_name):
    """The example source end to end (the demo's shipped seed model, measured on one seed): the
    attempts of each task as JSON; the task without a test output "not scored", never "solved 0";
    no held-out figures in a run without held-out tasks."""
    cfg = load_config("configs/soar-demo.yaml", SoarConfig, own_task_overrides(tmp_path, experiment_name))
    summary = runner.execute(soar.JOB, cfg)
    run_dir = tmp_path / experiment_name
    entry = summary["iterations"][0]
    assert (entry["tasks"], entry["scored"]) == (3, 2) and "heldout_solved_seeds" not in entry
    for tid in ("recolor-1-to-2", "flip-left-right", UNKNOWN):
        attempts = json.loads((run_dir / "attempts" / f"{tid}.json").read_text())
        assert (attempts["task_id"], attempts["iteration"], attempts["model_version"]) == (tid, 0, "v0")
        (test,) = attempts["tests"]  # one test input each
        assert test["input"] and all(type(v) is int for row in test["input"] for v in row)
        assert 1 <= len(test["attempts"]) <= 2  # the demo's seed model writes programs that run
        for attempt in test["attempts"]:
            assert all(type(v) is int for row in attempt["output"] for v in row)
            assert attempt["programs"] and all("def transform" in p["code"] for p in attempt["programs"])
            assert attempt["votes"] >= len(attempt["programs"])
            assert attempt["correct"] is None if tid == UNKNOWN else isinstance(attempt["correct"], bool)
        if tid == UNKNOWN:
            assert test["expected"] is None and attempts["solved"] is None
        else:
            assert attempts["solved"] == any(a["correct"] for a in test["attempts"])
    rows = {r["task_id"]: r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())}
    assert rows[UNKNOWN]["solved"] is None and rows[UNKNOWN]["oracle"] is None
    report = (run_dir / "report.md").read_text()
    assert f"| {UNKNOWN} | not scored | not scored |" in report
    assert "| 3 (1 not scored) |" in report  # the searches table: scored out of 2, not 3
    assert "held-out" not in report and "Held-out" not in report
    line = soar.headline(summary)
    assert line.startswith(f"iteration 0: solved {entry['solved']:g}/2 (oracle ") and ", 1 not scored, " in line
    assert "held-out" not in line


def test_a_search_with_no_test_outputs_at_all_is_not_scored():
    entry = {"iteration": 0, "tasks": 2, "scored": 0, "solved": None, "oracle": None, "programs": 24,
             "hit_rate": 0.0, "sampler_busy_frac": 0.5, "wall_s": 3.0}
    assert soar.headline({"iterations": [entry]}).startswith(
        "iteration 0: not scored (2 tasks without test outputs), 24 programs")


# --- the dry run: what it found, or one line saying what is wrong -----------------------------
def dry_run(argv: list[str], capsys, monkeypatch) -> tuple[int, str, str]:
    monkeypatch.setenv("RATCHET_REDIS_URL", UNREACHABLE)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    try:
        soar.main(["--config", "configs/soar-demo.yaml", "tasks.ids=[]", "tasks.heldout_ids=[]", *argv, "--dry-run"])
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, own_lines(err)


def test_a_dry_run_says_how_many_tasks_a_source_holds(capsys, monkeypatch):
    code, out, err = dry_run([f"tasks.split={SOURCE}"], capsys, monkeypatch)
    assert code == 0 and "nothing started (--dry-run)" in out
    assert (f"tasks: 3 searched, 0 held out, 0 extra from {SOURCE} (1 without test outputs: searched, not scored)"
            in err)


@pytest.mark.parametrize("source, message", [
    ("my_arc.tasks:load", "tasks.split='my_arc.tasks:load': module 'my_arc.tasks' does not import"),
    ("examples.arc_tasks:task", "tasks.split='examples.arc_tasks:task': examples.arc_tasks has no attribute 'task'"),
    ("_task_sources:NOT_A_FUNCTION", "tasks.split='_task_sources:NOT_A_FUNCTION' is a dict, not a function or class"),
    ("_task_sources:needs_a_path", "it is called as needs_a_path() but its signature is needs_a_path(path: 'str')"),
    ("_task_sources:fails", "tasks.split='_task_sources:fails': calling it raised FileNotFoundError: tasks.db"),
    ("_task_sources:a_list", "tasks.split='_task_sources:a_list' returned a list; return a non-empty dict of task id"),
    ("_task_sources:one_task", "returned one task (it has 'train'); return a dict of task id -> task"),
    ("_task_sources:ragged", "tasks.split='_task_sources:ragged': task 'bad' train[0].input: row 1 has 1 cells, "
                             "row 0 has 2; every task must be"),
    ("_task_sources:colour_ten", "task 'bad' train[0].input: cell [0][1] is 10, cells must be ints 0..9"),
])
def test_a_task_source_that_cannot_work_is_one_line_at_dry_run(source, message, capsys, monkeypatch):
    initialized = ray.is_initialized()
    code, _, err = dry_run([f"tasks.split={source}"], capsys, monkeypatch)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("python -m ray_jobs.soar: error: ") and message in err, err
    assert ray.is_initialized() == initialized  # refused before anything started


def test_a_held_out_task_without_test_outputs_is_refused(capsys, monkeypatch):
    """It was measured as unsolved on every seed: 0 counted where nothing could be known."""
    code, _, err = dry_run([f"tasks.split={SOURCE}", "tasks.ids=[recolor-1-to-2]",
                            "tasks.heldout_ids=[flip-answer-unknown]"], capsys, monkeypatch)
    assert code == 2 and err.count("\n") == 1, err
    assert "tasks.heldout_ids: ['flip-answer-unknown'] have no test outputs" in err


# --- task files -----------------------------------------------------------------------------
def task(inp: list[list[int]], out: list[list[int]] | None = None) -> dict:
    test = {"input": inp} if out is None else {"input": inp, "output": out}
    return {"train": [{"input": [[1]], "output": [[2]]}], "test": [test]}


def test_a_kaggle_challenges_file_takes_the_test_outputs_of_its_solutions_file(tmp_path):
    (tmp_path / "arc_challenges.json").write_text(json.dumps({"a": task([[1, 1]]), "b": task([[0, 1]])}))
    # a solutions file may cover tasks the (trimmed) challenges file does not: skipped, the rest read
    (tmp_path / "arc_solutions.json").write_text(json.dumps({"trimmed": [[[1]]], "a": [[[2, 2]]], "b": [[[0, 2]]]}))
    (tmp_path / "c.json").write_text(json.dumps(task([[1]])))  # one task per file, named by it (ARC's repos)
    tasks = load_split(str(tmp_path / "arc_challenges.json"))
    assert [t.test[0].output for t in tasks.values()] == [((2, 2),), ((0, 2),)]
    every = load_split(str(tmp_path))  # a directory: each task file; a solutions file with its challenges
    assert sorted(every) == ["a", "b", "c"] and every["a"].test[0].output == ((2, 2),)
    assert every["c"].test[0].output is None  # searched, not scored
    with pytest.raises(ValueError, match="holds only test outputs: give its _challenges.json file"):
        load_split(str(tmp_path / "arc_solutions.json"))
    (tmp_path / "arc_solutions.json").write_text(json.dumps({"a": [[[2, 2]], [[2]]]}))
    with pytest.raises(GridError, match="task 'a' has 1 test input"):
        load_split(str(tmp_path / "arc_challenges.json"))


def test_without_held_out_tasks_the_paired_differences_and_plots_have_no_held_out_columns(tmp_path):
    from evolution.comparisons import comparison_lines, comparisons
    from evolution.report import plot_iterations

    entries = [{"iteration": i, "model_version": f"v{i}", "seeds": [0, 1], "solved_seeds": [1.0 + i, 2.0],
                "hit_rate_seeds": [0.01, 0.02]} for i in range(2)]  # measured as measure() leaves them
    lines = comparison_lines(comparisons(entries, None), 1)
    assert lines[0] == "| iteration 1 minus | demo solved | demo hit rate |" and len(lines) == 3
    assert "held-out" not in "\n".join(lines)
    plot_iterations(entries, tmp_path / "iterations.png")
    assert (tmp_path / "iterations.png").exists()
