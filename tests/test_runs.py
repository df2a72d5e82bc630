"""`ratchet runs`: list, show and compare experiments from a real Redis store."""

from __future__ import annotations

import json

import pytest
from _capture import own_lines

from ray_jobs import cli
from ray_jobs.runs import headline_numbers

SOAR_A = {"iterations": [{"iteration": 0, "solved": 1.0, "hit_rate": 0.01, "curve": [{"k": 1, "solved": 0.5}]},
                         {"iteration": 1, "solved": 2.0, "hit_rate": 0.02, "curve": [{"k": 1, "solved": 1.0}]}],
          "wall_s": 120.5}
SOAR_B = {"iterations": [{"iteration": 0, "solved": 1.5, "hit_rate": 0.04, "curve": []}], "wall_s": 99.0,
          "baselines": {"seed_only": 0.5}}


@pytest.fixture
def runs(store):
    """Three experiments as the job runner leaves them: two finished, one failed."""
    reg = store.experiments
    reg.create("soar-a", "soar", {"iterations": 2, "search": {"samples_per_task": 64}}, config_hash="a")
    reg.set_result("soar-a", SOAR_A, headline="iteration 1: solved 2.00/4")
    reg.set_status("soar-a", "done")
    reg.create("soar-b", "soar", {"iterations": 1, "search": {"samples_per_task": 64}}, config_hash="b")
    reg.set_result("soar-b", SOAR_B, headline="iteration 0: solved 1.50/4")
    reg.set_status("soar-b", "done")
    reg.create("tpo-x", "tpo", {"iterations": 3}, config_hash="c")
    reg.set_status("tpo-x", "failed", error="RuntimeError: judge down")
    return store


def test_headline_numbers_read_lists_of_entries_at_their_last():
    assert headline_numbers(SOAR_A) == {"iterations[-1].iteration": 1.0, "iterations[-1].solved": 2.0,
                                        "iterations[-1].hit_rate": 0.02, "iterations[-1].curve[-1].k": 1.0,
                                        "iterations[-1].curve[-1].solved": 1.0, "wall_s": 120.5}


def test_list_shows_every_experiment_with_status_and_headline(runs, capsys):
    cli.main(["runs"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["experiment", "workload", "status", "updated", "headline"]
    rows = {line.split()[0]: line for line in out[1:]}
    assert set(rows) == {"soar-a", "soar-b", "tpo-x"}
    assert " done " in rows["soar-a"] and rows["soar-a"].endswith("iteration 1: solved 2.00/4")
    assert " failed " in rows["tpo-x"] and rows["tpo-x"].endswith("RuntimeError: judge down")
    cli.main(["runs", "--json"])
    assert {r["name"]: r["status"] for r in json.loads(capsys.readouterr().out)}["tpo-x"] == "failed"


def test_show_prints_one_record_and_its_numbers(runs, capsys):
    cli.main(["runs", "show", "soar-a"])
    out = capsys.readouterr().out
    assert "status      done" in out and "headline    iteration 1: solved 2.00/4" in out
    assert any(line.split() == ["iterations[-1].solved", "2"] for line in out.splitlines())
    cli.main(["runs", "show", "tpo-x", "--json"])
    assert json.loads(capsys.readouterr().out)["error"] == "RuntimeError: judge down"


def test_compare_puts_two_summaries_side_by_side_with_the_config_difference(runs, capsys):
    cli.main(["runs", "compare", "soar-a", "soar-b"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["soar-a", "soar-b", "b", "-", "a"]
    row = {line.split()[0]: line.split()[1:] for line in lines[1:] if line.strip()}
    assert row["iterations[-1].solved"] == ["2", "1.5", "-0.5"]
    assert row["wall_s"] == ["120.5", "99", "-21.5"]
    assert row["baselines.seed_only"] == ["-", "0.5"]  # only in b: no difference to show
    assert lines[-1] == "config fields that differ: iterations"
    cli.main(["runs", "compare", "soar-a", "soar-b", "--json"])
    rows = {r["field"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["iterations[-1].hit_rate"] == {"field": "iterations[-1].hit_rate", "soar-a": 0.02, "soar-b": 0.04}


def test_an_unknown_experiment_is_one_line_and_exit_2(runs, capsys):
    with pytest.raises(SystemExit) as stopped:
        cli.main(["runs", "show", "soar-c"])
    assert stopped.value.code == 2
    err = own_lines(capsys.readouterr().err).strip()
    assert err == "ratchet runs: no experiment named 'soar-c'; known: ['soar-a', 'soar-b', 'tpo-x']"


def test_an_empty_store_says_so(store, capsys):
    cli.main(["runs"])
    assert capsys.readouterr().out.startswith("no experiments in the store yet")


def test_an_unreachable_store_is_one_line_and_exit_1(monkeypatch, capsys):
    monkeypatch.setenv("RATCHET_REDIS_URL", "redis://:hunter2-pass@127.0.0.1:9/0")  # nothing listens on 9
    with pytest.raises(SystemExit) as stopped:
        cli.main(["runs"])
    err = own_lines(capsys.readouterr().err)
    assert stopped.value.code == 1 and len(err.strip().splitlines()) == 1
    assert err.startswith("ratchet runs: cannot reach Redis at redis://:***@127.0.0.1:9/0") and "hunter2" not in err
