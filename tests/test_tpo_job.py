"""The tpo job on a real local Ray (shipped seed, TRL DPO as a Ray task); and `ray job submit`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _ray_head import ray_head

from common.config import load_config
from ray_jobs import runner
from ray_jobs.tpo import JOB
from thinking.config import TpoConfig

FIELDS = {"iteration", "model_version", "score", "win_rate_vs_seed", "accuracy", "thought_len", "response_len",
          "unparsable_rate", "rho", "pairs", "wall_s", "score_seeds", "win_rate_vs_seed_seeds"}


def overrides(runs_dir: Path, experiment: str) -> list[str]:
    return [f"experiment={experiment}", f"runs_dir={runs_dir}", "iterations=1", "sample.instructions=6",
            "sample.k=4", "sample.max_tokens=32", "sample.batch_instructions=3", "measure.heldout=4",
            "measure.seeds=[0,1]", "train.max_steps=2", "train.batch_size=4"]


@pytest.mark.slow
def test_tpo_job_trains_both_arms_reports_and_resumes(ray_local, store, tmp_path, experiment_name):
    cfg = load_config("configs/tpo-demo.yaml", TpoConfig, overrides(tmp_path, experiment_name))
    summary = runner.execute(JOB, cfg, store)
    run_dir = tmp_path / experiment_name
    for name in ("config.yaml", "summary.json", "report.md", "iterations.png"):
        assert (run_dir / name).exists(), name
    on_disk = json.loads((run_dir / "summary.json").read_text())
    assert [e["iteration"] for e in on_disk["iterations"]] == [0, 1]
    assert [e["iteration"] for e in on_disk["baselines"]["direct"]] == [0, 1]
    for e in on_disk["iterations"] + on_disk["baselines"]["direct"]:
        assert FIELDS <= set(e), FIELDS - set(e)
    assert "win_rate_vs_direct" in on_disk["iterations"][1]
    notes = [m.note for m in store.models(experiment_name).list()]
    assert notes == ["seed", "thought iteration 1", "direct iteration 1"]
    assert store.experiments.get(experiment_name).status == "done"
    # a second start finds everything done: no new version, the same figures
    again = runner.execute(JOB, cfg, store)
    assert [m.note for m in store.models(experiment_name).list()] == notes
    timing = {"wall_s", "train_s", "measure_s"}  # a resumed run reports its own (short) times

    def figures(entries):
        return [{k: v for k, v in e.items() if k not in timing} for e in entries]

    assert figures(again["iterations"]) == figures(summary["iterations"])
    assert figures(again["baselines"]["direct"]) == figures(summary["baselines"]["direct"])


@pytest.mark.slow
def test_tpo_through_ray_job_submit(tmp_path, redis_server):
    """`ray job submit --working-dir .` against a locally started Ray head."""
    env = os.environ | {"RAY_ADDRESS": "", "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token"}
    with ray_head(env) as address:
        runtime_env = json.dumps({"env_vars": {"RATCHET_REDIS_URL": redis_server.url, "HF_HUB_OFFLINE": "1"},
                                  "excludes": [".venv", "runs", ".git"]})
        cmd = [sys.executable, "-m", "ray.scripts.scripts", "job", "submit", "--address",
               address, "--working-dir", ".", "--runtime-env-json", runtime_env, "--",
               sys.executable, "-m", "ray_jobs.tpo", "--config", "configs/tpo-demo.yaml",
               *overrides(tmp_path, "tpo-submit-test")]
        for _ in range(20):  # the head's job agent comes up after `ray start` returns: poll until it answers
            job = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
            if "No available agent to submit job" not in job.stderr:
                break
            time.sleep(3)
        assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
        assert "succeeded" in job.stdout.lower()
        summary = json.loads((tmp_path / "tpo-submit-test" / "summary.json").read_text())
        assert len(summary["iterations"]) == 2
