"""The soar job on a real local Ray: pools, run directory, summary fields; and `ray job submit`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _ray_head import ray_head

from common.config import load_config
from evolution.config import SoarConfig, TaskSetConfig
from evolution.loop import extra_tasks, load_tasks
from jobs import runner
from ray_jobs import soar

TASK_IDS = ["3c9b0459", "6150a2bd"]
HELDOUT_ID = "67a3c6ac"  # 3x3 too; never searched for hindsight, never trained on
EXTRA_ID = "25ff71a9"  # 3x3: searched for hindsight data only, never measured
ITERATION_FIELDS = {"iteration", "model_version", "tasks", "solved", "oracle", "programs", "executions",
                    "cache_hits", "sampler_busy_frac", "wall_s", "prefix_cache", "curve", "timing"}
MEASURED_FIELDS = {"seeds", "solved_seeds", "heldout_solved_seeds", "hit_rate", "heldout_hit_rate"}


def job_overrides(model: str, runs_dir: Path, experiment: str) -> list[str]:
    return [
        f"experiment={experiment}", f"runs_dir={runs_dir}", f"model.checkpoint={model}",
        f"tasks.ids=[{','.join(TASK_IDS)}]", "search.samples_per_task=8", "search.refinements_per_task=4",
        "search.batch=4", "search.max_tokens=48", "search.prompt_style=compact", "search.one_shot=false",
        "sampler.num_cpus_per_actor=0.5", "curve_budgets=[1,4,12]", "render_tasks=1",
        # the demo config measures and controls; tests that want them turn them back on
        "tasks.heldout_ids=[]", "controls.measure_models=false", "controls.random_prior=false",
        "controls.seed_only=false",
    ]


def test_soar_job_searches_learns_and_searches_again(ray_local, store, soar_model, tmp_path, experiment_name):
    """Two iterations: search with v0, hindsight SFT as a Ray task, v1 published and loaded
    by the sampler pool, search again; then a rerun resumes without redoing anything."""
    overrides = job_overrides(soar_model, tmp_path, experiment_name) + [
        "iterations=2", "learn.max_steps=5", "learn.batch_size=4",
        "filters.refine_ignores=[error,invalid_grid]",  # the test model is barely trained
        f"tasks.heldout_ids=[{HELDOUT_ID}]", f"tasks.extra_ids=[{EXTRA_ID}]", "controls.seeds=[0,1]",
        "controls.measure_models=true",
        "controls.random_prior=true", "controls.seed_only=true", "mix.enabled=true",
    ]
    cfg = load_config("configs/soar-demo.yaml", SoarConfig, overrides)
    summary = runner.execute(soar.JOB, cfg)
    run_dir = tmp_path / experiment_name
    for name in ("config.yaml", "metrics.jsonl", "summary.json", "report.md", "curve.png", "iterations.png",
                 f"task-{TASK_IDS[0]}.png"):
        assert (run_dir / name).exists(), name
    entries = json.loads((run_dir / "summary.json").read_text())["iterations"]
    assert summary["iterations"] == entries and [e["iteration"] for e in entries] == [0, 1]
    for entry in entries:
        assert ITERATION_FIELDS <= set(entry)
        assert entry["tasks"] == 2 and entry["programs"] == 2 * (8 + 4)  # the demo tasks' figures only
        assert entry["extra"]["tasks"] == 1 and entry["extra"]["programs"] == 8 + 4
        assert [p["n"] for p in entry["curve"]] == [1, 4, 12]
        assert 0 <= entry["solved"] <= entry["oracle"] + 1e-9 <= 2
        assert 0 < entry["sampler_busy_frac"] <= 1.0
        # a task's later requests reuse its grids from the engine's prefix cache
        assert 0 < entry["prefix_cache"]["reused_tokens"] < entry["prefix_cache"]["prompt_tokens"]
        assert MEASURED_FIELDS <= set(entry) and entry["seeds"] == [0, 1]
        assert len(entry["solved_seeds"]) == len(entry["heldout_solved_seeds"]) == 2
        assert all(0 <= x <= 2 for x in entry["solved_seeds"]) and all(0 <= x <= 1 for x in entry["heldout_solved_seeds"])
        assert 0 <= entry["heldout_hit_rate"] <= 1 and entry["timing"]["search_s"] == entry["wall_s"]
    models = store.models(experiment_name).list()
    if entries[1]["hindsight"]["rows"]:  # programs ran cleanly: a new model searched iteration 1
        assert [m.version for m in models] == ["v0", "v1"] and models[1].note == "iteration 1"
        assert entries[1]["model_version"] == "v1" and models[1].parent == "v0"
        assert (run_dir / "data" / "it0").exists()
        assert {"dataset_s", "train_s", "switch_s", "search_s"} <= set(entries[1]["timing"])
        assert entries[1]["weight_sync"] == "memory"  # sampler.weight_sync auto, transformers engine: the SFT's weights
        assert entries[1]["hindsight"]["tasks_with_rows"] == 3  # the extra task's programs are data too
        # both versions in one search, each on its own pool: the bandit and the uniform split
        for rule in ("thompson", "uniform"):
            mix = summary["baselines"][f"model_mix_{rule}"]
            assert mix["models"] == ["v0", "v1"] and len(mix["heldout_solved_seeds"]) == 2
            shares = mix["shares"]["heldout"]
            assert sum(m["programs"] for m in shares.values()) == 2 * (8 + 4)  # 2 seeds x 1 held-out task
            assert store.archive(f"{experiment_name}.mix-{rule}.demo.s0").get_task(TASK_IDS[0])
        assert "## Several models in one search" in (run_dir / "report.md").read_text()
    assert entries[0]["model_version"] == "v0"
    for name in ("random_prior", "seed_only_control"):
        control = summary["baselines"][name]
        assert MEASURED_FIELDS <= set(control) and len(control["solved_seeds"]) == 2
        assert all(0 <= x <= 2 for x in control["solved_seeds"]) and len(control["heldout_solved_seeds"]) == 2
    control = store.models(f"{experiment_name}.seed-only").current()
    assert control.note == "seed-only control" and control.metrics["from"] == f"{experiment_name}/v0"
    assert summary["baselines"]["seed_only_control"]["steps"] == 5
    report = (run_dir / "report.md").read_text()
    assert "random-program prior" in report and "seed-only control" in report and "held-out solved" in report
    assert {"last_minus_seed_model", "last_minus_seed_only_control"} <= set(summary["comparisons"])
    assert "held-out solved minus the seed-only control" in soar.headline(summary)
    # it opens with the paired differences, the seed-only control first (issue #42); the rest follows
    first = report.index("## Did it learn? Paired differences")
    assert first < report.index("## Models against controls") < report.index("## Searches")
    assert report.index("| the seed-only control |", first) < report.index("| the seed model (iteration 0) |", first)
    # held-out tasks were searched, in their own namespaces only: hindsight never saw them
    assert not store.archive(experiment_name).get_task(HELDOUT_ID)
    assert store.archive(experiment_name).get_task(EXTRA_ID)  # searched with the demo tasks ...
    assert not store.archive(f"{experiment_name}.eval.v0.demo.s1").get_task(EXTRA_ID)  # ... never measured
    assert store.archive(f"{experiment_name}.eval.v0.heldout.s1").get_task(HELDOUT_ID)
    assert store.experiments.get(experiment_name).status == "done"
    # a rerun resumes from the store: budgets spent, the model already trained, nothing redone
    again = runner.execute(soar.JOB, cfg)
    assert [e["programs"] for e in again["iterations"]] == [e["programs"] for e in entries]
    assert [e["solved_seeds"] for e in again["iterations"]] == [e["solved_seeds"] for e in entries]
    assert store.models(experiment_name).list() == models
    assert store.models(f"{experiment_name}.seed-only").list() == [control]


def test_the_headline_ends_with_the_held_out_difference_from_the_seed_only_control():
    last = {"iteration": 1, "solved": 3, "tasks": 19, "oracle": 4, "programs": 456, "hit_rate": 0.02,
            "sampler_busy_frac": 0.9, "wall_s": 70}
    held = {"n": 3, "mean": 1.0, "ci95": [-0.5, 2.5], "diffs": [1, 0, 2]}
    summary = {"iterations": [last], "comparisons": {"last_minus_seed_only_control": {"heldout_solved_seeds": held},
                                                     "last_minus_seed_model": {"heldout_solved_seeds": held | {"mean": 9}}}}
    line = soar.headline(summary)
    assert line.startswith("iteration 1: solved 3/19")
    assert line.endswith("held-out solved minus the seed-only control +1.00 [-0.50, +2.50] over 3 seeds")
    assert "control" not in soar.headline({"iterations": [last]})  # nothing measured: the search alone


def test_held_out_tasks_must_not_be_search_tasks():
    with pytest.raises(ValueError, match="held-out tasks must never be trained on"):
        load_tasks(TaskSetConfig(ids=TASK_IDS, heldout_ids=[TASK_IDS[0]]))


def test_extra_tasks_are_other_small_tasks_whose_prompts_fit():
    from evolution.prompts import sampling_prompt
    from evolution.tasks import max_side

    named = "0d3d703e"  # 3x3, in neither of the demo config's lists
    cfg = load_config("configs/soar-demo.yaml", SoarConfig, ["tasks.extra_limit=40", f"tasks.extra_ids=[{named}]"])
    tasks, heldout = load_tasks(cfg.tasks)
    extra = extra_tasks(cfg, tasks, heldout)
    assert len(extra) == 41 and next(iter(extra)) == named  # explicit ids first, then 40 picked
    assert not set(extra) & {*tasks, *heldout}
    assert all(max_side(t) <= 10 and len(sampling_prompt(t)) <= cfg.search.max_prompt_chars for t in extra.values())
    assert extra_tasks(load_config("configs/soar-demo.yaml", SoarConfig), tasks, heldout) == {}
    other = load_config("configs/soar-demo.yaml", SoarConfig, ["tasks.extra_split=arc1-eval", "tasks.extra_ids=[0c786b71]"])
    assert list(extra_tasks(other, tasks, heldout)) == ["0c786b71"]  # an evaluation task, searched for data only
    with pytest.raises(ValueError, match="tasks.extra_ids .* are also demo or held-out tasks"):
        extra_tasks(load_config("configs/soar-demo.yaml", SoarConfig, [f"tasks.extra_ids=[{TASK_IDS[0]}]"]), tasks,
                    heldout)
    with pytest.raises(ValueError, match="tasks.extra_limit=-1 must be >= 0"):
        TaskSetConfig(extra_limit=-1)


@pytest.mark.slow
def test_soar_through_ray_job_submit(soar_model, tmp_path, redis_server):
    """`ray job submit --working-dir .` against a locally started Ray head."""
    # token auth as a real cluster has it: the head writes the token, the client reads it
    env = os.environ | {"RAY_ADDRESS": "", "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token"}
    with ray_head(env) as address:
        runtime_env = json.dumps({"env_vars": {"RATCHET_REDIS_URL": redis_server.url, "HF_HUB_OFFLINE": "1"},
                                  "excludes": [".venv", "runs", ".git"]})
        cmd = [sys.executable, "-m", "ray.scripts.scripts", "job", "submit", "--address", address,
               "--working-dir", ".", "--runtime-env-json", runtime_env, "--",
               sys.executable, "-m", "ray_jobs.soar", "--config", "configs/soar-demo.yaml",
               *job_overrides(soar_model, tmp_path, "submit-test")]
        job = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
        assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
        assert "succeeded" in job.stdout.lower()
        entry = json.loads((tmp_path / "submit-test" / "summary.json").read_text())["iterations"][0]
        assert entry["programs"] >= 16
