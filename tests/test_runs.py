"""`ratchet runs`: list, show and compare experiments from a real Redis store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _capture import own_lines

from jobs.runs import cause, headline_numbers
from ray_jobs import cli

ROOT = Path(__file__).resolve().parent.parent

SOAR_A = {"iterations": [{"iteration": 0, "solved": 1.0, "hit_rate": 0.01, "curve": [{"k": 1, "solved": 0.5}]},
                         {"iteration": 1, "solved": 2.0, "hit_rate": 0.02, "curve": [{"k": 1, "solved": 1.0}]}],
          "wall_s": 120.5}
SOAR_B = {"iterations": [{"iteration": 0, "solved": 1.5, "hit_rate": 0.04, "curve": []}], "wall_s": 99.0,
          "baselines": {"seed_only": 0.5}}
# a Ray task's error as the runner records it (`Type: message`), and one with a repr'd actor death
RAY_TASK_ERROR = ("RayTaskError(ValueError): ray::SamplerWorker.generate() (pid=4242, ip=10.0.0.1)\n"
                  '  File "/work/search/engines/openai_engine.py", line 88, in generate\n'
                  "    raise ValueError(message)\n"
                  "ValueError: http://localhost:8000/v1 rejected the request: continue_final_message: unknown field")
REPR_ERROR = ("InfrastructureError: sampler request failed on 3 actors in a row (last: ActorDiedError('The actor "
              "died unexpectedly before finishing this task.\\n\\tclass_name: SamplerWorker\\n\\tactor_id: "
              + "ab" * 400 + "\\n\\tpid: 4242')); see the actors' logs")


def scaling_summary(shift: float = 0.0) -> dict:
    """Scaling's summary shape: `differences` is a series per strategy against a baseline, one entry per k."""
    return {"pool": {"questions": 48, "k_inf": 4},
            "differences": [{"strategy": s, "baseline": "consistency", "k": k, "k_verif": 4, "difference": d + shift}
                            for s, d in (("verification", 0.1), ("weighted_best_of_n", -0.05)) for k in (1, 2, 4)],
            "wall_s": 10.0}


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


def test_show_prints_one_record_by_section_and_its_figures_by_group(runs, capsys):
    cli.main(["runs", "show", "soar-a"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "soar-a (soar)"
    assert {"status", "config"} <= set(lines) and any(line.startswith("figures (last finished run") for line in lines)
    assert "  status    done" in lines and "  headline  iteration 1: solved 2.00/4" in lines
    group = {line.split()[0]: line.split(None, 1)[1] for line in lines if line.startswith("  iterations")}
    assert group["iterations[-1]"] == "hit_rate 0.02, iteration 1, solved 2"
    assert group["iterations[-1].curve[-1]"] == "k 1, solved 1"
    assert "  (summary)" in "\n".join(lines) and len(lines) < 25  # figures by group, not a row each
    cli.main(["runs", "show", "tpo-x", "--json"])
    assert json.loads(capsys.readouterr().out)["error"] == "RuntimeError: judge down"


def test_a_failed_runs_headline_is_its_one_line_cause(runs, capsys):
    """A Ray task's error is a whole traceback, and a repr'd exception packs one into a line:
    the list shows the exception the traceback ends with, one short line."""
    reg = runs.experiments
    reg.create("scaling-f", "scaling", {}, config_hash="f")
    reg.set_status("scaling-f", "failed", error=RAY_TASK_ERROR)
    reg.create("soar-f", "soar", {}, config_hash="g")
    reg.set_status("soar-f", "failed", error=REPR_ERROR)
    cli.main(["runs"])
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 6  # the header and one line per experiment
    rows = {line.split()[0]: line for line in out[1:]}
    assert rows["scaling-f"].endswith("  ValueError: http://localhost:8000/v1 rejected the request: "
                                      "continue_final_message: unknown field")
    assert rows["soar-f"].endswith("  InfrastructureError: sampler request failed on 3 actors in a row (last: "
                                   "ActorDiedError('The actor died unexpectedly before finishing this task. ...')); "
                                   "see the actors' logs")
    assert "class_name" not in rows["soar-f"]
    cli.main(["runs", "show", "scaling-f"])
    shown = capsys.readouterr().out.splitlines()
    assert "  cause     ValueError: http://localhost:8000/v1 rejected the request: continue_final_message: " \
           "unknown field" in shown and not any("File " in line for line in shown)
    assert cause("Stopped: stopped by SIGTERM") == "Stopped: stopped by SIGTERM"
    assert len(cause("RuntimeError: " + "x" * 5000)) == 200


def test_show_and_compare_name_each_strategy_of_a_series(store, capsys):
    """`differences` holds a series per strategy (one entry per k): each strategy's last entry is
    shown, named, where `differences[-1]` said neither which strategy nor against what."""
    reg = store.experiments
    for name, shift in (("scaling-a", 0.0), ("scaling-b", 0.02)):
        reg.create(name, "scaling", {}, config_hash=name)
        reg.set_result(name, scaling_summary(shift))
    cli.main(["runs", "show", "scaling-a"])
    out = capsys.readouterr().out
    assert "differences[-1]" not in out
    lines = [line.strip() for line in out.splitlines()]
    assert "differences[strategy=verification, baseline=consistency]" in lines
    assert "differences[strategy=weighted_best_of_n, baseline=consistency]" in lines
    cli.main(["runs", "compare", "scaling-a", "scaling-b"])
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("differences[strategy=weighted_best_of_n, baseline=consistency]")
    assert lines[at + 1].split() == ["difference", "-0.05", "-0.03", "+0.02"]
    assert lines[at + 2].split() == ["k", "4", "4", "0"]
    rows = {r["field"] for r in json.loads(_json(["runs", "compare", "scaling-a", "scaling-b", "--json"], capsys))}
    assert "differences[strategy=verification, baseline=consistency].difference" in rows


def _json(argv: list[str], capsys) -> str:
    cli.main(argv)
    return capsys.readouterr().out


def test_compare_puts_two_summaries_side_by_side_with_the_config_difference(runs, capsys):
    cli.main(["runs", "compare", "soar-a", "soar-b"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["soar-a", "soar-b", "b", "-", "a"]

    def rows(group: str) -> dict[str, list[str]]:  # the indented rows under a group's heading
        at = lines.index(group) + 1
        block = lines[at:next((i for i in range(at, len(lines)) if not lines[i].startswith("  ")), len(lines))]
        return {line.split()[0]: line.split()[1:] for line in block}

    assert rows("iterations[-1]")["solved"] == ["2", "1.5", "-0.5"]
    assert rows("(summary)")["wall_s"] == ["120", "99", "-21.5"]  # 3 significant figures, as the logs
    assert rows("baselines")["seed_only"] == ["-", "0.5"]  # only in b: no difference to show
    assert lines[-2:] == ["config fields that differ (soar-a -> soar-b):", "  iterations  2 -> 1"]
    cli.main(["runs", "compare", "soar-a", "soar-b", "--json"])
    rows = {r["field"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["iterations[-1].hit_rate"] == {"field": "iterations[-1].hit_rate", "soar-a": 0.02, "soar-b": 0.04}


def test_compare_rounds_as_the_reports_do_and_float_noise_reads_0(store, capsys):
    reg = store.experiments
    reg.create("tpo-a", "tpo", {"judge": {"kind": "arith"}, "sampler": {"engine_kwargs": {"api_key": "***"}}},
               config_hash="a")
    reg.set_result("tpo-a", {"win_rate": 0.1 + 0.2, "margin": -1.1102230246251565e-16, "lr": 5e-05})
    reg.create("tpo-b", "tpo", {"judge": {"kind": "length"}, "sampler": {"engine_kwargs": {"api_key": "***"}}},
               config_hash="b")
    reg.set_result("tpo-b", {"win_rate": 0.3, "margin": 0.0, "lr": 5e-05})
    cli.main(["runs", "compare", "tpo-a", "tpo-b"])
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.startswith("  ")}
    assert rows["win_rate"] == ["0.3", "0.3", "0"] and rows["margin"] == ["0", "0", "0"]
    assert rows["lr"] == ["5e-05", "5e-05", "0"] and "e-16" not in out and "e-17" not in out
    assert rows["judge.kind"] == ['"arith"', "->", '"length"']  # the config field, with both values
    assert "engine_kwargs" not in out  # a secret is *** in both records: no difference to show


def test_a_reader_that_stops_early_ends_the_output_quietly(store, redis_server):
    """`ratchet runs show X | head`: the pipe closes under a long output; no BrokenPipeError."""
    reg = store.experiments
    reg.create("big", "soar", {}, config_hash="h")
    reg.set_result("big", {f"group{g}": {f"figure{i}": i + 0.5 for i in range(400)} for g in range(60)})
    env = os.environ | {"PYTHONPATH": str(ROOT), "RATCHET_REDIS_URL": redis_server.url}
    proc = subprocess.Popen([sys.executable, "-m", "ray_jobs.cli", "runs", "show", "big"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().strip()  # the first line came
    proc.stdout.close()  # as `head -1` does; the rest (megabytes) no longer fits the pipe
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1  # Python's own exit status for a closed pipe
    assert err == "", err


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
