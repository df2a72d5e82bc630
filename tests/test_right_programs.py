"""evolution.right_programs: which tasks each search archive of an experiment holds a right program for."""

from __future__ import annotations

import pytest

from evolution.right_programs import is_right, main, right_on_test


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


def test_an_experiment_without_archives_is_named_in_the_error(store, experiment_name):
    with pytest.raises(SystemExit, match=experiment_name):
        main([experiment_name], store=store)


def test_help_says_what_the_tool_is_for(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "Which tasks each search of a SOAR experiment found a right program for" in capsys.readouterr().out
