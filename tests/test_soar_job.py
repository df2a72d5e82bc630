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


def test_soar_job_searches_learns_and_searches_again(ray_local, store, soar_model, tmp_path, experiment_name):
    """Two iterations: search with v0, hindsight SFT as a Ray task, v1 published and loaded
    by the sampler pool, search again; then a rerun resumes without redoing anything."""
    overrides = job_overrides(soar_model, tmp_path, experiment_name) + [
        "iterations=2", "learn.max_steps=5", "learn.batch_size=4",
        "filters.refine_ignores=[error,invalid_grid]",  # the test model is barely trained
        "controls.random_prior=true", "controls.seeds=[0,1]",
    ]
    cfg = load_config("configs/soar-demo.yaml", SoarConfig, overrides)
    summary = run(cfg)
    run_dir = tmp_path / experiment_name
    for name in ("config.yaml", "metrics.jsonl", "summary.json", "report.md", "curve.png", f"task-{TASK_IDS[0]}.png"):
        assert (run_dir / name).exists(), name
    entries = json.loads((run_dir / "summary.json").read_text())["iterations"]
    assert summary["iterations"] == entries and [e["iteration"] for e in entries] == [0, 1]
    for entry in entries:
        assert ITERATION_FIELDS <= set(entry)
        assert entry["tasks"] == 2 and entry["programs"] == 2 * (8 + 4)
        assert [p["n"] for p in entry["curve"]] == [1, 4, 12]
        assert 0 <= entry["solved"] <= entry["oracle"] + 1e-9 <= 2
        assert 0 < entry["sampler_busy_frac"] <= 1.0
    models = store.models(experiment_name).list()
    if entries[1]["hindsight"]["rows"]:  # programs ran cleanly: a new model searched iteration 1
        assert [m.version for m in models] == ["v0", "v1"] and models[1].note == "iteration 1"
        assert entries[1]["model_version"] == "v1" and models[1].parent == "v0"
        assert (run_dir / "data" / "it0").exists()
    assert entries[0]["model_version"] == "v0"
    prior = summary["baselines"]["random_prior"]
    assert len(prior["solved_seeds"]) == 2 and all(0 <= x <= 2 for x in prior["solved_seeds"])
    assert "Random-program prior" in (run_dir / "report.md").read_text()
    assert store.experiments.get(experiment_name).status == "done"
    # a rerun resumes from the store: budgets spent, the model already trained, nothing redone
    again = run(cfg)
    assert [e["programs"] for e in again["iterations"]] == [e["programs"] for e in entries]
    assert store.models(experiment_name).list() == models


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
