"""The soar job on a real local Ray: pools, run directory, summary fields; and `ray job submit`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from common.config import load_config
from ray_jobs.soar import SoarConfig, run

TASK_IDS = ["3c9b0459", "6150a2bd"]
ITERATION_FIELDS = {"iteration", "model_version", "tasks", "solved", "oracle", "programs", "executions",
                    "cache_hits", "sampler_busy_frac", "wall_s", "curve"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job_overrides(model: str, runs_dir: Path, experiment: str) -> list[str]:
    return [
        f"experiment={experiment}", f"runs_dir={runs_dir}", f"model.checkpoint={model}",
        f"tasks.ids=[{','.join(TASK_IDS)}]", "search.samples_per_task=8", "search.refinements_per_task=4",
        "search.batch=4", "search.max_tokens=48", "search.prompt_style=compact", "search.one_shot=false",
        "sampler.num_cpus_per_actor=0.5", "curve_budgets=[1,4,12]", "render_tasks=1",
    ]


def test_soar_job_writes_the_run_directory(ray_local, store, soar_model, tmp_path, experiment_name):
    cfg = load_config("configs/soar-demo.yaml", SoarConfig, job_overrides(soar_model, tmp_path, experiment_name))
    summary = run(cfg)
    run_dir = tmp_path / experiment_name
    for name in ("config.yaml", "metrics.jsonl", "summary.json", "report.md", "curve.png", f"task-{TASK_IDS[0]}.png"):
        assert (run_dir / name).exists(), name
    entry = json.loads((run_dir / "summary.json").read_text())["iterations"][0]
    assert ITERATION_FIELDS <= set(entry)
    assert entry["tasks"] == 2 and entry["programs"] == 2 * 8 + sum(
        json.loads(line)["programs"] - 8 for line in (run_dir / "metrics.jsonl").read_text().splitlines())
    assert [p["n"] for p in entry["curve"]] == [1, 4, 12]
    assert 0 <= entry["solved"] <= entry["oracle"] + 1e-9 <= 2
    assert 0 < entry["sampler_busy_frac"] <= 1.0
    assert summary == json.loads((run_dir / "summary.json").read_text())
    assert store.experiments.get(experiment_name).status == "done"
    # a second run resumes from the store: the budget is spent, nothing is sampled again
    again = run(cfg)
    assert again["iterations"][0]["programs"] == entry["programs"]


@pytest.mark.slow
def test_soar_through_ray_job_submit(soar_model, tmp_path, redis_server):
    """`ray job submit --working-dir .` against a locally started Ray head."""
    # token auth as a real cluster has it: the head writes the token, the client reads it
    env = os.environ | {"RAY_ADDRESS": "", "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token"}
    gcs_port, dashboard_port = free_port(), free_port()
    head = subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--num-cpus=2",
                           f"--port={gcs_port}", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}",
                           "--disable-usage-stats"], env=env, capture_output=True, text=True)
    assert head.returncode == 0, head.stderr
    try:
        runtime_env = json.dumps({"env_vars": {"RATCHET_REDIS_URL": redis_server.url, "HF_HUB_OFFLINE": "1"},
                                  "excludes": [".venv", "runs", ".git"]})
        cmd = [sys.executable, "-m", "ray.scripts.scripts", "job", "submit", "--address", f"http://127.0.0.1:{dashboard_port}",
               "--working-dir", ".", "--runtime-env-json", runtime_env, "--",
               sys.executable, "-m", "ray_jobs.soar", "--config", "configs/soar-demo.yaml",
               *job_overrides(soar_model, tmp_path, "submit-test")]
        job = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
        assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
        assert "succeeded" in job.stdout.lower()
        entry = json.loads((tmp_path / "submit-test" / "summary.json").read_text())["iterations"][0]
        assert entry["programs"] >= 16
    finally:
        subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "stop", "--force"], env=env, capture_output=True)
