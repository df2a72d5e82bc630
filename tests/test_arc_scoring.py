"""Grid validation, per-input scoring, pass@2 with fractional credit, submission scoring."""

from __future__ import annotations

import numpy as np
import pytest

from verifiers.arc import ArcTask, GridError, cell_accuracy, pass_at_2, score_submission
from verifiers.arc.grids import decode_rows, encode_rows, parse_tasks, validate_grid
from verifiers.arc.results import InputResult, ProgramResult
from verifiers.arc.scoring import score_input

A = ((1, 2), (3, 4))
B = ((1, 2), (3, 5))
C = ((0,),)


@pytest.mark.parametrize("bad,match", [
    ([], "non-empty"), ([[]], "row 0"), ([[1, 2], [3]], "row 1 has 1 cells"),
    ([[10]], "cells must be ints 0..9"), ([[-1]], "0..9"), ([[1.0]], "0..9"),
    ([[True]], "0..9"), ([["1"]], "0..9"), ([[0] * 31], "31 columns"), ([[0]] * 31, "31 rows"),
    ("01", "non-empty list of rows"), (np.zeros((2, 2, 2), dtype=int), "2-D"),
])
def test_validate_grid_rejects_with_a_message(bad, match):
    with pytest.raises(GridError, match=match):
        validate_grid(bad, "here")


def test_validate_grid_accepts_lists_tuples_and_int_arrays():
    assert validate_grid([[1, 2], [3, 4]]) == A
    assert validate_grid(np.array([[1, 2], [3, 4]])) == A
    assert validate_grid(((0,),)) == C


def test_wire_roundtrip_and_untrusted_decoding():
    assert decode_rows(encode_rows(A)) == A
    for bad in [[], ["12", "3"], ["1a"], "12", [12], ["0" * 31], ["1"] * 31, None, [""]]:
        assert decode_rows(bad) is None


def test_cell_accuracy():
    assert cell_accuracy(A, A) == 1.0
    assert cell_accuracy(A, B) == 0.75
    assert cell_accuracy(A, C) == 0.0
    wide = ((1, 2, 0), (3, 4, 0))  # the rows match, the columns do not: no cell is compared
    assert cell_accuracy(wide, A) == 0.0 and cell_accuracy(A, wide) == 0.0
    row = ((1, 2, 3),)  # a one-row grid: its width is its only row's
    assert cell_accuracy(row, row) == 1.0 and cell_accuracy(((1, 2, 4),), row) == pytest.approx(2 / 3)


def test_score_input():
    ok = score_input(InputResult("ok", A), B)
    assert (ok.correct, ok.shape_match, ok.cell_accuracy) == (False, True, 0.75)
    failed = score_input(InputResult("timeout", None, "Timeout", "x"), B)
    assert (failed.correct, failed.shape_match, failed.cell_accuracy) == (False, False, 0.0)
    unknown = score_input(InputResult("ok", A), None)
    assert unknown.correct is None
    wide = score_input(InputResult("ok", ((1, 2, 0), (3, 4, 0))), A)  # as many rows, more columns
    assert (wide.correct, wide.shape_match, wide.cell_accuracy) == (False, False, 0.0)
    row = score_input(InputResult("ok", ((1, 2, 4),)), ((1, 2, 3),))
    assert (row.correct, row.shape_match) == (False, True)


def test_train_accuracy():
    r = ProgramResult("t", "h", (InputResult("ok", A, correct=True),
                                 InputResult("ok", A, correct=False),
                                 InputResult("error", correct=False)), ())
    assert r.train_accuracy == pytest.approx(1 / 3)


@pytest.mark.parametrize("attempts,expected,score", [
    ([[A, B]], [A], 1.0),             # first attempt right
    ([[B, A]], [A], 1.0),             # second attempt right
    ([[B, C]], [A], 0.0),
    ([[A]], [A], 1.0),                # one attempt is allowed
    ([[None, A]], [A], 1.0),          # a missing attempt is just wrong
    ([[A, B], [B, B]], [A, A], 0.5),  # fractional credit over test inputs
    ([[A], [C], [B]], [A, C, A], 2 / 3),
])
def test_pass_at_2(attempts, expected, score):
    assert pass_at_2(attempts, expected) == pytest.approx(score)


def test_pass_at_2_rejects_three_attempts_and_misaligned_lists():
    with pytest.raises(ValueError, match="at most 2"):
        pass_at_2([[B, B, A]], [A])
    with pytest.raises(ValueError, match="one list of up to 2 grids per test input"):
        pass_at_2([[A]], [A, A])


def test_score_submission_kaggle_format():
    t1 = ArcTask.from_json({"train": [{"input": [[1]], "output": [[1]]}],
                            "test": [{"input": [[1]], "output": [[1, 2], [3, 4]]},
                                     {"input": [[2]], "output": [[0]]}]}, "t1")
    t2 = ArcTask.from_json({"train": [{"input": [[1]], "output": [[1]]}],
                            "test": [{"input": [[1]], "output": [[5]]}]}, "t2")
    t3 = ArcTask.from_json({"train": [{"input": [[1]], "output": [[1]]}],
                            "test": [{"input": [[1]], "output": [[5]]}]}, "t3")
    submission = {
        "t1": [{"attempt_1": [[0]], "attempt_2": [[1, 2], [3, 4]]},   # solved on attempt 2
               {"attempt_1": "garbage", "attempt_2": [[1]]}],          # wrong
        "t2": [{"attempt_1": [[5]], "attempt_2": [[5]]}],
        # t3 missing: scores 0
    }
    s = score_submission(submission, {"t1": t1, "t2": t2, "t3": t3})
    assert s.per_task == {"t1": 0.5, "t2": 1.0, "t3": 0.0}
    assert s.score == 1.5 and s.total == 3 and s.fraction == pytest.approx(0.5)
    assert score_submission(submission, {}).fraction == 0.0  # no task scored: 0, not a division by 0


def test_parse_tasks_single_and_mapping():
    one = {"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[3]]}]}
    assert list(parse_tasks(one, "x")) == ["x"]
    many = parse_tasks({"a": one, "b": one})
    assert list(many) == ["a", "b"] and many["a"].test[0].output is None
    with pytest.raises(GridError, match=r"task 'a' train\[0\]: a train example needs an 'output'"):
        parse_tasks({"a": {"train": [{"input": [[1]]}], "test": [{"input": [[1]]}]}})
    with pytest.raises(GridError, match=r"task 'b' test\[0\].input: row 1"):
        parse_tasks({"b": {"train": [{"input": [[1]], "output": [[1]]}],
                           "test": [{"input": [[1, 2], [3]]}]}})
    assert ArcTask.from_json(many["a"].to_json(), "a") == many["a"]
