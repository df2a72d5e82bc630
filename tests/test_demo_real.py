"""drills/demo_real.py (make demo-real) names each workload's experiment by its config's content: a
rerun resumes its own run, and a changed config starts anew instead of being refused. On 2026-12-03 a fresh
clone's `make demo-real` met the machine's Redis holding `scaling-smollm-vllm` from an earlier
config, and the job (rightly) refused to resume it."""

from __future__ import annotations

from pathlib import Path

from drills import demo_real as demo

ROOT = Path(__file__).resolve().parent.parent


def test_demo_experiments_follow_the_config_and_its_overrides(tmp_path):
    cfg = tmp_path / "tpo-smollm.yaml"
    cfg.write_text("experiment: tpo-smollm\niterations: 2\n")
    first = demo.demo_experiment(cfg, [])
    assert first.startswith("tpo-smollm-") and first == demo.demo_experiment(cfg, [])  # a rerun resumes
    assert demo.demo_experiment(cfg, ["iterations=1"]) != first  # other overrides: another experiment
    cfg.write_text("experiment: tpo-smollm\niterations: 3\n")
    assert demo.demo_experiment(cfg, []) != first  # a changed config: another experiment


def test_a_rebuilt_verifier_adapter_is_another_demo_experiment(tmp_path, monkeypatch):
    """The verifier demo's config names an embedded adapter; its manifest is part of the digest, so a
    rebuilt adapter never meets the stored verdicts of the old one (the job would refuse them)."""
    monkeypatch.setattr(demo, "ROOT", tmp_path)
    (tmp_path / "models" / "lora").mkdir(parents=True)
    (tmp_path / "models" / "lora" / "manifest.json").write_text('{"recipe_hash": "a"}')
    cfg = tmp_path / "scaling-smollm-verifier.yaml"
    cfg.write_text("experiment: scaling-smollm-verifier\nverifier: models/lora   # merged once\n")
    first = demo.demo_experiment(cfg, [])
    assert first == demo.demo_experiment(cfg, [])
    (tmp_path / "models" / "lora" / "manifest.json").write_text('{"recipe_hash": "b"}')
    assert demo.demo_experiment(cfg, []) != first


def test_the_verifier_demo_is_a_scaling_job_on_its_own_config():
    job, stem = demo.CONFIGS["verifier"]
    assert job == "scaling" and (ROOT / "configs" / f"{stem}.yaml").exists()
    assert "verifier" not in demo.DEFAULT_WORKLOADS  # make demo-real keeps its four steps


def test_a_finished_job_reports_its_headline(tmp_path, monkeypatch):
    """The demo's last lines carry each job's own headline (for scaling: Verification@k - Consistency@k
    with its CI and the verifier's AUC beside the votes'), not only where the report is."""
    import json

    monkeypatch.setattr(demo, "ROOT", tmp_path)
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "scaling-smollm-verifier.yaml").write_text("experiment: x\n")
    summary = {"pool": {"k_inf": 8}, "wall_s": 1.0, "differences": [
        {"strategy": "verification", "k": 8, "difference": -0.1, "ci_low": -0.2, "ci_high": 0.05}],
        "own_verification": {"within_question_auc": 0.6, "answer_frequency_auc": 0.8, "mixed_questions": 4}}

    def job(cmd, cwd, check):  # stands in for the scaling job: what it leaves in runs/<experiment>/
        experiment = next(a for a in cmd if a.startswith("experiment=")).split("=", 1)[1]
        (tmp_path / "runs" / experiment).mkdir(parents=True)
        (tmp_path / "runs" / experiment / "summary.json").write_text(json.dumps(summary))

    monkeypatch.setattr(demo.subprocess, "run", job)
    out = demo.run_job("verifier", [], engine="vllm")
    assert out["headline"].startswith("scaling: verification - consistency at k=8: -0.100 [-0.200, +0.050]")
    assert "verifier 0.600, answer votes 0.800" in out["headline"]
