"""The chaos run (scripts/chaos.py, `make chaos`): each job of a small run is killed at every
point (driver, sampler actor, verifier actor, sandbox worker, redis-server) and restarted; the
final archive and registry match an uninterrupted run. Slow: minutes per workload."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))


@pytest.mark.slow
@pytest.mark.parametrize("workload", ["soar", "scaling", "tpo"])
def test_a_run_killed_at_every_point_ends_as_an_uninterrupted_one(workload, tmp_path):
    import chaos

    assert chaos.main(["--workloads", workload, "--seed", "0", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "chaos.json").read_text())[workload]
    assert all(report["checks"].values()), report["checks"]
    made = {k["point"] for k in report["kills"] if k["made"]}
    assert made, report["kills"]  # at least one kill landed while the run was going


@pytest.mark.parametrize("workload", ["soar", "scaling", "tpo"])
def test_each_chaos_run_is_a_config_its_job_accepts(workload):
    """The small runs' overrides still parse (a renamed field once made the scaling chaos run
    fail at its first line, unseen because the chaos run itself is slow)."""
    import importlib

    import chaos_jobs

    from common.config import load_config

    module, config, overrides = chaos_jobs.JOBS[workload]
    job = importlib.import_module(module).JOB
    load_config(Path(__file__).resolve().parents[1] / config, job.config_cls, overrides)
