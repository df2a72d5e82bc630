"""evolution.right_programs: which tasks each search archive of an experiment holds a right program for."""

from __future__ import annotations

import pytest

from evolution.right_programs import is_right, main, primitive_counts, right_on_test


def _rec(task: str, code: str, train: list[bool], test: list[bool]) -> dict:
    return {"task_id": task, "code": code, "train_correct": train, "test_correct": test}


def test_right_means_every_train_and_test_pair():
    assert is_right({"train_correct": [True, True], "test_correct": [True]})
    assert not is_right({"train_correct": [True, True], "test_correct": [False]})
    assert not is_right({"train_correct": [True, False], "test_correct": [True]})
    assert not is_right({"train_correct": [], "test_correct": []})  # ran on nothing
    assert not is_right({"kind": "sample"})
    assert right_on_test({"train_correct": [False], "test_correct": [True, True]})
    assert not right_on_test({"train_correct": [True], "test_correct": [True, False]})
    assert not right_on_test({"train_correct": [True], "test_correct": []})


def test_each_archive_of_the_experiment_names_its_tasks_with_a_right_program(store, experiment_name, capsys,
                                                                             monkeypatch):
    monkeypatch.setenv("RATCHET_REDIS_URL", "redis://127.0.0.1:1")  # the store given is the one read
    store.archive(experiment_name).add_many([
        _rec("t1", "a", [True, True], [True]),
        _rec("t1", "b", [False, True], [True]),
        _rec("t2", "c", [True], [False]),  # right on train only: not right
        _rec("t3", "g", [False, True], [True]),  # right on the test only: the oracle's, not right
    ])
    store.archive(f"{experiment_name}.seed-only.heldout.s0").add_many([
        _rec("h1", "d", [False], [False]),
        _rec("h2", "e", [True], [True]),
    ])
    store.archive(f"{experiment_name}x").add_many([_rec("t9", "f", [True], [True])])  # another experiment
    main([experiment_name], store=store)
    rows = capsys.readouterr().out.splitlines()[2:]
    assert rows == [f"| {experiment_name} | 3 | 1 | t1 | t3 |",
                    f"| {experiment_name}.seed-only.heldout.s0 | 2 | 1 | h2 |  |"]


@pytest.mark.parametrize("flags", [[], ["--primitives"]])
def test_an_experiment_without_archives_is_named_in_the_error(store, experiment_name, flags):
    with pytest.raises(SystemExit, match=experiment_name):
        main([experiment_name, *flags], store=store)


def test_help_says_what_the_tool_is_for(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "Which tasks each search of a SOAR experiment found a right program for" in capsys.readouterr().out


def test_primitives_are_counted_once_a_program_per_model(store, experiment_name, capsys):
    def prog(*steps: str) -> str:
        return "def transform(grid):\n" + "".join(f"    grid = {s}(grid)\n" for s in steps) + "    return grid\n"

    store.archive(experiment_name).add_many([
        {"task_id": "t1", "code": prog("rot90", "rot90"), "model_version": "v0"},  # rot90 once
        {"task_id": "t1", "code": prog("rot90", "flip_h"), "model_version": "v0"},
        {"task_id": "t2", "code": prog("transpose"), "model_version": "v0"},
        {"task_id": "t2", "code": prog("not_a_primitive"), "model_version": "v0"},
        {"task_id": "t1", "code": prog("flip_h"), "model_version": "v1"},
        {"task_id": "t1", "code": prog("not_a_primitive"), "model_version": "v2"},  # calls none
    ])
    assert primitive_counts([prog("rot90", "rot90"), prog("rot90", "flip_h")]) == {"rot90": 2, "flip_h": 1}
    main([experiment_name, "--primitives"], store=store)
    rows = capsys.readouterr().out.splitlines()[2:]
    # v0: 4 programs, 3 primitives; the two most used (rot90 2, then flip_h or transpose 1) are 3 of 4 calls
    assert rows[0].startswith(f"| {experiment_name} | v0 | 4 | 3 | 0.75 | rot90 ")
    assert rows[1] == f"| {experiment_name} | v1 | 1 | 1 | 1.00 | flip_h |"
    assert rows[2] == f"| {experiment_name} | v2 | 1 | 0 | 0.00 |  |"
