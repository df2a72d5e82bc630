"""The shared job runner: run dir and config.yaml, the experiment record, and a status that is
right however the job ends (done, or failed with the error)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import yaml

from ray_jobs import runner


@dataclass
class ToyConfig:
    experiment: str = "toy"  # registry namespace
    runs_dir: str = "runs"
    fail: bool = False  # raise inside the job
    iterations: int = 1


async def toy_run(cfg: ToyConfig, ctx: runner.JobContext) -> dict:
    if cfg.fail:
        raise RuntimeError("the toy job broke")
    return {"iterations": cfg.iterations, "run_dir": str(ctx.run_dir)}


TOY = runner.JobSpec(workload="toy", config_cls=ToyConfig, run=toy_run, doc="A toy job.\n\nMore.",
                     headline=lambda s: f"{s['iterations']} iterations", iterations_flag=True)


def test_a_job_that_finishes_is_done_with_its_config_on_disk(ray_local, store, tmp_path, experiment_name, capsys):
    cfg = runner.parse(TOY, [f"experiment={experiment_name}", f"runs_dir={tmp_path}", "--iterations", "3"])
    summary = runner.execute(TOY, cfg, store)
    assert summary == {"iterations": 3, "run_dir": str(tmp_path / experiment_name)}
    assert yaml.safe_load((tmp_path / experiment_name / "config.yaml").read_text())["iterations"] == 3
    record = store.experiments.get(experiment_name)
    assert (record.workload, record.status, record.error) == ("toy", "done", "")
    assert "3 iterations" in capsys.readouterr().out


def test_a_job_that_raises_is_failed_with_the_error(ray_local, store, tmp_path, experiment_name):
    cfg = runner.parse(TOY, [f"experiment={experiment_name}", f"runs_dir={tmp_path}", "fail=true"])
    with pytest.raises(RuntimeError, match="toy job broke"):
        runner.execute(TOY, cfg, store)
    record = store.experiments.get(experiment_name)
    assert (record.status, record.error) == ("failed", "RuntimeError: the toy job broke")


def test_every_job_runs_through_the_runner():
    from ray_jobs import sft_demo, soar

    assert soar.JOB.workload == "soar" and soar.JOB.iterations_flag
    assert sft_demo.JOB.workload == "sft-demo"
