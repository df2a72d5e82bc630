"""Bring your own checker (issue #49): a user's `module:function` decides which scaling candidates
are correct, `--dry-run` refuses a checker or a dataset that cannot work in one line, report.md
never prints nan, and every candidate's text is kept beside pool.npz."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import ray
from _capture import own_lines

from examples.checkers import exact_text
from ray_jobs import scaling
from scaling.arith_problems import generated_problems
from scaling.config import ScalingConfig
from search.scored_pool import ScoredPool, synthetic_pool
from verifiers.math_answers import grade_answers, is_equivalent

UNREACHABLE = "redis://127.0.0.1:1/0"  # a check that came after the store would exit 1 here, not 2
# The documented example (docs/configuration.md, Plug-in points), cut to seconds: 4 questions x 4 candidates.
DOCUMENTED = ["--config", "configs/scaling-demo.yaml", "checker=examples.checkers:exact_text"]
SMALL = ["in_process=true", "mode=curves", "questions=4", "k_inf=4", "k_verif=1", "k_tie=0", "curves.seeds=2",
         "curves.bootstrap=20"]


# checkers this module offers by name (`test_scaling_checker:...`), as a user's module would
def every_answer(answer: str, reference: str) -> bool:
    return True


def one_argument(answer: str) -> bool:
    return True


def says_maybe(answer: str, reference: str) -> str:
    return "maybe"


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    """(exit code, stderr) of the scaling job's command line, in this process."""
    try:
        scaling.main(argv)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    return code, own_lines(capsys.readouterr().err)


def candidates(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "candidates.jsonl").read_text().splitlines()]


# --- the checker decides correctness ---------------------------------------------------------
def test_a_checker_judges_each_answer_and_splits_a_class_it_calls_partly_correct():
    answers = ["12", "12.0", None, "13", "12"]
    assert grade_answers(answers, "12") == ([0, 0, -1, 1, 0], [True, False])  # math-verify: 12.0 is 12
    assert grade_answers(answers, "12", "examples.checkers:exact_text") == ([0, 1, -1, 2, 0], [True, False, False])
    assert exact_text("  New   York ", "new york") and not exact_text("12.0", "12")


def test_a_checker_must_return_a_bool():
    with pytest.raises(TypeError, match=r"checker='test_scaling_checker:says_maybe' returned 'maybe' \(str\)"):
        grade_answers(["12"], "12", "test_scaling_checker:says_maybe")


@pytest.mark.parametrize("verdict, ok", [
    (True, True), (0, True), (np.bool_(True), True),  # numpy's scalar bool: a checker comparing arrays
    (2, False), (np.float64(1.0), False), (np.array([True, False]), False), ("yes", False), (None, False),
])
def test_a_verdict_is_a_bool_or_numpys_scalar_bool(verdict, ok):
    from verifiers.math_answers import _is_verdict

    assert _is_verdict(verdict) is ok


def test_an_answer_the_extractor_did_not_find_is_wrong_without_asking_the_checker():
    from verifiers.math_answers import check_answer

    assert check_answer("examples.checkers:exact_text", None, "12") is False
    assert check_answer("examples.checkers:exact_text", "12", "12") is True


def test_the_documented_checker_decides_which_candidates_are_correct(store, experiment_name, tmp_path, capsys):
    code, err = run_cli([*DOCUMENTED, *SMALL, f"experiment={experiment_name}", f"runs_dir={tmp_path}"], capsys)
    assert code == 0, err
    out = tmp_path / experiment_name
    rows = candidates(out)
    assert [(r["question"], r["candidate"]) for r in rows] == [(i, j) for i in range(4) for j in range(4)]
    assert all(isinstance(r["text"], str) and r["reference"] for r in rows)
    assert [r["correct"] for r in rows] == [r["answer"] is not None and exact_text(r["answer"], r["reference"])
                                            for r in rows]
    assert ScoredPool.load(out / "pool.npz").correct.ravel().tolist() == [r["correct"] for r in rows]
    assert store.experiments.get(experiment_name).status == "done"
    (out / "candidates.jsonl").unlink()  # a rerun resumes from the store and writes them again
    code, err = run_cli([*DOCUMENTED, *SMALL, f"experiment={experiment_name}", f"runs_dir={tmp_path}"], capsys)
    assert code == 0 and candidates(out) == rows, err


def jsonl_dataset(path: Path, reference=lambda answer: answer) -> str:
    rows = generated_problems("arith", 4, seed=1000)
    path.write_text("".join(json.dumps({"question": r["question"], "answer": reference(r["answer"])}) + "\n"
                            for r in rows))
    return str(path)


def small_config(experiment: str, runs_dir: Path, **kw) -> ScalingConfig:
    cfg = ScalingConfig(experiment=experiment, runs_dir=str(runs_dir), model="models/scaling-arith-seed",
                        mode="curves", questions=4, in_process=True, prompt_style="compact", k_inf=4, k_verif=1,
                        k_tie=0, temperature=1.0, max_tokens=48, verify_max_tokens=8, **kw)
    cfg.curves.seeds, cfg.curves.bootstrap = 2, 20
    return cfg


def test_the_checkers_verdict_replaces_math_verifys(store, experiment_name, tmp_path):
    """References written "9.0": math-verify takes the model's "9" for right, the string checker does not."""
    dataset = jsonl_dataset(tmp_path / "dotted.jsonl", reference=lambda answer: f"{answer}.0")
    scaling.run(small_config(experiment_name, tmp_path, dataset=dataset, checker="examples.checkers:exact_text"))
    rows = candidates(tmp_path / experiment_name)
    assert any(r["answer"] is not None and is_equivalent(r["answer"], r["reference"]) for r in rows)
    assert not any(r["correct"] for r in rows)


def test_a_checker_that_passes_every_answer_makes_every_answered_candidate_correct(store, experiment_name,
                                                                                    tmp_path):
    summary = scaling.run(small_config(experiment_name, tmp_path, checker="test_scaling_checker:every_answer"))
    rows = candidates(tmp_path / experiment_name)
    assert [r["correct"] for r in rows] == [r["answer"] is not None for r in rows]
    assert all(r["answer"] is not None for r in rows)  # the seed model ends every answer with one (seeded)
    assert {s: summary["curves"][s][-1]["accuracy"] for s in ("pass", "consistency")} == {"pass": 1.0,
                                                                                        "consistency": 1.0}


# --- --dry-run refuses, in one line, before Redis or Ray -------------------------------------
def refusal(argv: list[str], capsys, monkeypatch) -> str:
    monkeypatch.setenv("RATCHET_REDIS_URL", UNREACHABLE)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    initialized = ray.is_initialized()
    code, err = run_cli([*argv, "--dry-run"], capsys)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert ray.is_initialized() == initialized  # nothing started for a config that cannot run
    return err


@pytest.mark.parametrize("checker, message", [
    ("my_checkers:loose", "checker='my_checkers:loose': module 'my_checkers' does not import"),
    ("examples.checkers:nothere", "examples.checkers has no attribute 'nothere'"),
    ("test_scaling_checker:one_argument", "checker='test_scaling_checker:one_argument': it is called as "
                                          "one_argument(answer, reference) but its signature is one_argument(answer"),
    ("test_scaling_checker:UNREACHABLE", "checker='test_scaling_checker:UNREACHABLE' is a str, not a function"),
    ("examples.checkers", "checker='examples.checkers' must look like module:attr"),
])
def test_a_checker_that_cannot_be_called_so_is_refused(checker, message, capsys, monkeypatch):
    assert message in refusal([*DOCUMENTED[:2], f"checker={checker}"], capsys, monkeypatch)


@pytest.mark.parametrize("lines, message", [
    (['{"question": "1+1?", "answer": "2"}', '{"question": "2+2?"}'],
     ".jsonl:2 needs 'question' (or 'problem') and 'answer'; it has ['question']"),
    (["question,answer", "1+1?,2"], ".jsonl:1 is not JSON"),
    (['[{"question": "1+1?", "answer": "2"}]'], ".jsonl:1 is a JSON list, not an object"),
    ([], "holds no rows"),
])
def test_a_dataset_row_the_job_cannot_read_is_refused_naming_file_and_line(lines, message, tmp_path, capsys,
                                                                           monkeypatch):
    path = tmp_path / "data.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    err = refusal([*DOCUMENTED[:2], f"dataset={path}"], capsys, monkeypatch)
    assert f"dataset={str(path)!r}" in err and message in err


def test_a_good_checker_and_dataset_pass_the_dry_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RATCHET_REDIS_URL", UNREACHABLE)
    code, err = run_cli([*DOCUMENTED, f"dataset={jsonl_dataset(tmp_path / 'ok.jsonl')}", "--dry-run"], capsys)
    assert (code, err) == (0, "")


# --- report.md never prints nan --------------------------------------------------------------
def report_of(correct: bool, probs: bool) -> str:
    from scaling.curves import CurvesConfig, compute_curves
    from scaling.report import report

    base = synthetic_pool(questions=6, candidates=4, verdicts=2, seed=1)
    p = np.random.default_rng(0).random(base.verdicts.shape).astype(np.float32) if probs else None
    pool = ScoredPool(base.question_ids, np.full_like(base.correct, correct), base.answer_ids,
                      np.full_like(base.answer_correct, correct), base.verdicts, base.compare_counts, base.score, p)
    summary = compute_curves(pool, CurvesConfig(seeds=2, bootstrap=20)).summary()
    cfg = ScalingConfig(experiment="x", verdict="constrained" if probs else "parsed")
    return report(cfg, summary | {"own_verification": pool.own_verification()})


@pytest.mark.parametrize("probs", [False, True])
@pytest.mark.parametrize("correct, missing", [(False, "no correct candidates"), (True, "no wrong candidates")])
def test_a_pool_without_correct_or_wrong_candidates_reports_no_nan(correct, missing, probs):
    text = report_of(correct, probs)
    assert "nan" not in text.lower() and f"not measured: {missing}" in text
    assert ("not measured (" in text) == probs  # the probability paragraph names what it could not measure


def test_the_headline_leaves_out_an_auc_it_could_not_measure():
    own = {"within_question_auc": float("nan"), "answer_frequency_auc": float("nan"), "mixed_questions": 0}
    line = scaling.headline({"pool": {"k_inf": 4}, "wall_s": 1.0, "differences": [], "own_verification": own})
    assert "nan" not in line and "AUC" not in line
