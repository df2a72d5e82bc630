"""drills/mutation.py (scripts/mutate.py) without cosmic-ray: every target names files that exist, a branch's changed
files map to the modules to mutate, the budget stops new modules, and the mutants' time limit
follows the unmutated run. Mutation itself: `make mutate` (docs/testing.md)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from drills import mutation as mutate

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(mutate.TARGETS))
def test_every_target_names_a_module_tests_and_top_level_names_that_exist(name):
    t = mutate.TARGETS[name]
    assert (ROOT / t.path).is_file(), t.path
    assert mutate.test_files(t) and all((ROOT / f).is_file() for f in mutate.test_files(t)), t.tests
    mutate.skipped_lines(ROOT / t.path, t)  # raises naming a skipped or only-listed name that is gone


def test_test_files_are_the_files_among_the_pytest_arguments():
    t = mutate.Target("a.py", "tests/test_a.py 'tests/test_b.py::test_x[p-1]' -k 'not slow or pool.py' -x")
    assert mutate.test_files(t) == {"tests/test_a.py", "tests/test_b.py"}


def test_changed_files_map_to_their_modules_and_to_every_module_their_tests_cover():
    targets = {"a": mutate.Target("pkg/a.py", "tests/test_a.py -k fast"),
               "b": mutate.Target("pkg/b.py", "tests/test_shared.py tests/test_b.py::test_one"),
               "c": mutate.Target("pkg/c.py", "tests/test_shared.py")}
    assert mutate.changed_modules(["pkg/b.py", "README.md"], targets) == ["b"]
    assert mutate.changed_modules(["tests/test_shared.py"], targets) == ["b", "c"]
    assert mutate.changed_modules(["tests/test_b.py", "pkg/a.py"], targets) == ["a", "b"]  # TARGETS' order
    assert mutate.changed_modules(["docs/testing.md", "pkg/__init__.py"], targets) == []
    assert mutate.changed_modules(["tests/test_placement.py"], mutate.TARGETS) == ["placement"]
    assert set(mutate.changed_modules(["tests/test_strategies.py"], mutate.TARGETS)) >= {
        "strategies_base", "pass_at_k", "best_of_n", "verification", "selection"}


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                   capture_output=True)


def test_changed_files_are_the_diff_against_the_base_and_new_files_git_keeps(tmp_path, monkeypatch):
    _git(tmp_path, "init", "-q", "-b", "main")
    (tmp_path / ".gitignore").write_text("runs/\n")
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("y = 1\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "one")
    (tmp_path / "b.py").write_text("y = 2\n")
    _git(tmp_path, "commit", "-q", "-am", "two")
    monkeypatch.setattr(mutate, "ROOT", tmp_path)
    assert mutate.default_base() == "HEAD"  # no origin/main: the uncommitted changes
    assert mutate.changed_files("HEAD") == []
    (tmp_path / "a.py").write_text("x = 2\n")  # uncommitted
    (tmp_path / "new.py").write_text("")  # untracked, not ignored
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "out.py").write_text("")  # ignored
    assert mutate.changed_files("HEAD") == ["a.py", "new.py"]
    assert mutate.changed_files("HEAD~1") == ["a.py", "b.py", "new.py"]  # a branch's commits too
    with pytest.raises(SystemExit, match="--changed nosuch"):
        mutate.changed_files("nosuch")


def test_the_mutants_time_limit_is_ten_unmutated_runs_within_bounds():
    t = mutate.Target("a.py", "tests/test_a.py", timeout_s=300.0)
    assert [mutate.mutant_timeout(t, s) for s in (0.5, 3.0, 10.0, 60.0)] == [30.0, 30.0, 100.0, 300.0]


def test_the_budget_starts_no_module_after_it_is_spent(monkeypatch, capsys):
    now = [0.0]
    ran = []

    def fake_run(name, t, tools, python, out, recheck, with_annotations):
        ran.append(name)
        now[0] += 100.0  # each module takes 100 s
        return 9, 1, 100.0, 3

    monkeypatch.setattr(mutate, "time", SimpleNamespace(monotonic=lambda: now[0]))
    monkeypatch.setattr(mutate, "run", fake_run)
    monkeypatch.setattr(sys, "argv", ["mutate.py", "--budget-s", "150", "keys", "lease", "rex"])
    mutate.main()
    out = capsys.readouterr().out
    assert ran == ["keys", "lease"]  # lease starts at 100 s (within 150), rex would start at 200 s
    assert "not run: rex" in out
    assert "keys                   9         1        90%      100            3" in out


def test_changed_runs_only_the_changed_modules_and_says_so(monkeypatch, capsys):
    ran = []
    monkeypatch.setattr(mutate, "changed_files", lambda base: ["store/lease.py", "README.md"])
    monkeypatch.setattr(mutate, "run", lambda name, *a: ran.append(name) or (4, 0, 1.0, 0))
    monkeypatch.setattr(sys, "argv", ["mutate.py", "--changed", "HEAD~2"])
    mutate.main()
    assert ran == ["lease"] and "changed since HEAD~2: lease" in capsys.readouterr().out
    monkeypatch.setattr(mutate, "changed_files", lambda base: ["README.md"])
    mutate.main()
    assert ran == ["lease"] and "no mutated module or its tests" in capsys.readouterr().out


ANNOTATED = """from __future__ import annotations

def f(x: int | None, /, y: A | B, *a: C | D, k: E | F = 1, **kw: G) -> H | I:
    z: J | K = x | 1
    class Local:
        field: L | M = 0
    return lambda q: q | 2

def g(é: N | O) -> P: ...

class Config:
    size: Q | R = 0
    def __init__(self, judge: S | T) -> None: ...
    async def score(self, items: U | V) -> W: ...
"""


def _texts(source: str, spans) -> list[str]:
    lines = source.splitlines()
    assert all(a[0] == b[0] for a, b in spans)  # one line each here
    return [lines[a[0] - 1][a[1]:b[1]] for a, b in spans]


def test_annotations_nothing_evaluates_are_the_functions_and_locals_not_classes_or_constructors():
    spans = mutate.unevaluated_annotations(ANNOTATED)
    assert sorted(_texts(ANNOTATED, spans)) == sorted([
        "int | None", "A | B", "C | D", "E | F", "G", "H | I", "J | K", "N | O", "P", "U | V", "W"])
    assert mutate.unevaluated_annotations(ANNOTATED.replace("from __future__ import annotations", "")) == []


def test_mutants_inside_those_annotations_are_marked_skipped_and_the_rest_left_to_run(tmp_path):
    db = tmp_path / "s.sqlite"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE mutation_specs (job_id, start_pos_row, start_pos_col, end_pos_row, end_pos_col)")
        con.execute("CREATE TABLE work_results (worker_outcome, output, test_outcome, diff, job_id)")
        line = ANNOTATED.splitlines()[2]
        bar = [i for i, c in enumerate(line) if c == "|"]  # int | None, A | B, ..., H | I
        con.executemany("INSERT INTO mutation_specs VALUES (?, 3, ?, 3, ?)", [(f"ann{i}", c, c + 1) for i, c in enumerate(bar)])
        con.execute("INSERT INTO mutation_specs VALUES ('body', 4, 17, 4, 18)")  # x | 1: code
        con.execute("INSERT INTO mutation_specs VALUES ('lambda', 7, 18, 7, 19)")  # q | 2: code
        con.execute("INSERT INTO mutation_specs VALUES ('field', 6, 17, 6, 18)")  # a class field: config reads it
        con.execute("INSERT INTO mutation_specs VALUES ('done', 3, 8, 3, 9)")  # already has a result
        con.execute("INSERT INTO work_results VALUES ('SKIPPED', 'Filtered operator', NULL, NULL, 'done')")
    assert mutate.skip_annotations(db, ANNOTATED) == len(bar) == 5
    with sqlite3.connect(db) as con:
        skipped = {j for (j,) in con.execute("SELECT job_id FROM work_results WHERE output = ?", (mutate.ANNOTATION_FILTER,))}
        assert skipped == {f"ann{i}" for i in range(5)}
        assert con.execute("SELECT output FROM work_results WHERE job_id = 'done'").fetchone() == ("Filtered operator",)
