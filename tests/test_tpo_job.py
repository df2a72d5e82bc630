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
from jobs import runner
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


def test_a_dpo_task_that_could_never_be_scheduled_is_refused_with_the_numbers(ray_local, store, tmp_path,
                                                                             experiment_name):
    """A sampler and a pool judge at 1 CPU each on a 2-CPU Ray leave nothing for the DPO task: the
    old job started anyway and hung forever at its first training, silently."""
    from common.config import ConfigError

    cfg = load_config("configs/tpo-demo.yaml", TpoConfig, overrides(tmp_path, experiment_name) + [
        "judge.kind=pairwise", "judge.checkpoint=models/tpo-arith-seed", "sampler.num_cpus_per_actor=1"])
    with pytest.raises(ConfigError, match=r"asks for CPU: 3 at once .*train.num_cpus \(the DPO task\): 1 x CPU: 1\) "
                                          r"but the cluster's 1 alive node\(s\) have CPU: 2"):
        runner.execute(JOB, cfg, store)
    assert not store.models(experiment_name).list()  # refused before anything started


def test_train_num_cpus_is_what_the_dpo_task_asks_ray_for(monkeypatch):
    """It was never used: the DPO task always asked for 1 CPU."""
    import training.common as common
    import training.dpo as dpo

    asked: dict = {}

    class Remote:
        def options(self, **kw):
            asked.update(kw)
            return self

        def remote(self, *args):
            return "ref"

    monkeypatch.setattr(common.ray, "remote", lambda fn: Remote())
    monkeypatch.setattr(common, "gpu_options", lambda: {"num_gpus": 0})
    assert dpo.train_dpo_remote(None, [], num_cpus=0.25) == "ref" and asked["num_cpus"] == 0.25
