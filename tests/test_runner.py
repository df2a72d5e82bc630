"""The shared job runner: run dir and config.yaml, the experiment record, and a status that is
right however the job ends (done, or failed with the error)."""

from __future__ import annotations

import io
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import ray
import yaml

from common.config import config_hash, to_dict
from jobs import runner

log = logging.getLogger("toy")
SECRET = "sk-live-0123456789abcdef"
REDIS_PASSWORD = "hunter2-redis-pass"


@dataclass
class ToyConfig:
    experiment: str = "toy"  # registry namespace
    runs_dir: str = "runs"
    fail: bool = False  # raise inside the job
    iterations: int = 1
    engine_kwargs: dict = field(default_factory=dict)  # e.g. an api_key
    queue_url: str = ""  # a URL that may carry a password


async def toy_run(cfg: ToyConfig, ctx: runner.JobContext) -> dict:
    log.info("engine kwargs %s, queue %s", cfg.engine_kwargs, cfg.queue_url)
    if cfg.fail:
        key = cfg.engine_kwargs.get("api_key")
        raise RuntimeError("the toy job broke" + (f" (key {key})" if key else ""))
    return {"iterations": cfg.iterations, "run_dir": str(ctx.run_dir), "api_key": cfg.engine_kwargs.get("api_key"),
            "queue_url": cfg.queue_url}


TOY = runner.JobSpec(workload="toy", config_cls=ToyConfig, run=toy_run, doc="A toy job.\n\nMore.",
                     headline=lambda s: f"{s['iterations']} iterations", iterations_flag=True)


def test_a_job_that_finishes_is_done_with_its_config_on_disk(ray_local, store, tmp_path, experiment_name, caplog):
    cfg = runner.parse(TOY, [f"experiment={experiment_name}", f"runs_dir={tmp_path}", "--iterations", "3"])
    with caplog.at_level(logging.INFO, logger="jobs.runner"):
        summary = runner.execute(TOY, cfg, store)
    assert (summary["iterations"], summary["run_dir"]) == (3, str(tmp_path / experiment_name))
    assert yaml.safe_load((tmp_path / experiment_name / "config.yaml").read_text())["iterations"] == 3
    record = store.experiments.get(experiment_name)
    assert (record.workload, record.status, record.error) == ("toy", "done", "")
    # the headline is a log line and, with the summary, part of the record (`ratchet runs`)
    assert any(r.getMessage().startswith("3 iterations -> ") for r in caplog.records)
    assert (record.headline, record.summary["iterations"]) == ("3 iterations", 3) and record.finished > 0


def test_the_run_dir_keeps_the_whole_log_and_the_console_a_line_per_step(ray_local, store, tmp_path, experiment_name,
                                                                       capsys):
    from common.logs import setup_logging

    setup_logging()  # the console handler, as a command has it

    async def run(cfg: ToyConfig, ctx: runner.JobContext) -> dict:
        await toy_run(cfg, ctx)  # logs its engine kwargs, a secret among them
        step = logging.getLogger("evolution.toy")
        step.info("iteration 1 (v1): solved 7 (+1)")
        step.debug("seed 3: solved 6, hit rate 0.0121")  # the detail: run.log only
        return {"iterations": 1}

    spec = runner.JobSpec(workload="toy", config_cls=ToyConfig, run=run, doc="A toy job.")
    cfg = runner.parse(spec, [f"experiment={experiment_name}", f"runs_dir={tmp_path}",
                              f"engine_kwargs={{api_key: {SECRET}}}"])
    runner.execute(spec, cfg, store)
    text = (tmp_path / experiment_name / runner.RUN_LOG).read_text()
    assert "iteration 1 (v1): solved 7 (+1)" in text and "DEBUG evolution.toy: seed 3: solved 6" in text
    assert "engine kwargs" in text and SECRET not in text
    err = capsys.readouterr().err
    assert "iteration 1 (v1): solved 7 (+1)" in err and "seed 3" not in err
    assert logging.getLogger("evolution").level == logging.NOTSET  # the run's levels end with it


def test_overrides_may_follow_the_options(tmp_path, experiment_name):
    """`--iterations 3 search.batch=4`: argparse took overrides only before the first option."""
    cfg = runner.parse(TOY, ["--iterations", "3", f"experiment={experiment_name}", "--print-config",
                             f"runs_dir={tmp_path}"])
    assert (cfg.iterations, cfg.experiment, cfg.runs_dir) == (3, experiment_name, str(tmp_path))


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


def _until(check, what: str, timeout_s: float = 120.0) -> None:
    """Poll a condition another process makes true (not a sleep standing in for it)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        time.sleep(0.1)


def test_secrets_never_reach_config_yaml_the_record_or_logs_but_the_job_has_them(
        ray_local, store, tmp_path, experiment_name):
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    url = f"redis://:{REDIS_PASSWORD}@queue.internal:6380/0"
    try:
        cfg = runner.parse(TOY, [f"experiment={experiment_name}", f"runs_dir={tmp_path}",
                                 f"engine_kwargs={{api_key: {SECRET}, max_tokens: 64}}", f"queue_url={url}"])
        summary = runner.execute(TOY, cfg, store)
        assert (summary["api_key"], summary["queue_url"]) == (SECRET, url)  # the job gets the real values
        failing = runner.parse(TOY, [f"experiment={experiment_name}-f", f"runs_dir={tmp_path}", "fail=true",
                                     f"engine_kwargs={{api_key: {SECRET}}}"])
        with pytest.raises(RuntimeError):
            runner.execute(TOY, failing, store)
    finally:
        root.removeHandler(handler)
    written = (tmp_path / experiment_name / "config.yaml").read_text()
    record = store.experiments.get(experiment_name)
    failed = store.experiments.get(f"{experiment_name}-f")
    for text in (written, repr(record), repr(failed), stream.getvalue()):
        assert SECRET not in text and REDIS_PASSWORD not in text
    assert record.summary["api_key"] == "***"  # the summary the record keeps, too
    assert yaml.safe_load(written)["engine_kwargs"] == {"api_key": "***", "max_tokens": 64}
    assert record.config["queue_url"] == "redis://:***@queue.internal:6380/0"
    assert "engine kwargs" in stream.getvalue() and "***" in stream.getvalue()
    assert failed.status == "failed" and "key ***" in failed.error


def test_a_failing_job_run_from_the_cli_prints_no_secret(ray_local, store, tmp_path, experiment_name, capsys):
    """The CLI's error goes through the redacting log, not Python's traceback printer."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logging.getLogger().addHandler(handler)
    try:
        with pytest.raises(SystemExit) as stopped:
            runner.main(TOY, [f"experiment={experiment_name}", f"runs_dir={tmp_path}", "fail=true",
                              f"engine_kwargs={{api_key: {SECRET}}}"])
    finally:
        logging.getLogger().removeHandler(handler)
    assert stopped.value.code == 1
    logged = stream.getvalue() + capsys.readouterr().err
    assert "toy job failed" in logged and "Traceback" in logged and SECRET not in logged


def test_a_rerun_with_another_config_refuses_unless_allowed_and_the_change_is_recorded(
        ray_local, store, tmp_path, experiment_name):
    base = [f"experiment={experiment_name}", f"runs_dir={tmp_path}"]
    runner.execute(TOY, runner.parse(TOY, base), store)
    runner.execute(TOY, runner.parse(TOY, base), store)  # the same config resumes
    changed = runner.parse(TOY, [*base, "iterations=2"])
    with pytest.raises(ValueError, match=r"changed: iterations.*--allow-config-change"):  # ConfigChanged
        runner.execute(TOY, changed, store)
    assert yaml.safe_load((tmp_path / experiment_name / "config.yaml").read_text())["iterations"] == 1
    first = store.experiments.get(experiment_name)
    assert first.config["iterations"] == 1 and first.config_hash and first.status == "done"
    previous = signal.getsignal(signal.SIGTERM)
    try:
        summary = runner.main(TOY, [*base, "--iterations", "2", "--allow-config-change"])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert summary["iterations"] == 2
    record = store.experiments.get(experiment_name)
    assert record.config["iterations"] == 2 and record.config_hash != first.config_hash
    assert [c["fields"] for c in record.config_changes] == [["iterations"]]
    assert record.config_changes[0]["from"] == first.config_hash
    assert record.config_changes[0]["values"] == {"iterations": [1, 2]}  # `ratchet runs show` prints them


RERUN = textwrap.dedent("""
    import sys
    from dataclasses import dataclass, field

    import ray

    from jobs import runner

    @dataclass
    class ToyConfig:  # tests/test_runner.py's, field for field: the same config hashes the same
        experiment: str = "toy"
        runs_dir: str = "runs"
        fail: bool = False
        iterations: int = 1
        engine_kwargs: dict = field(default_factory=dict)
        queue_url: str = ""

    try:
        runner.main(runner.JobSpec(workload="toy", config_cls=ToyConfig, run=lambda cfg, ctx: {}, doc="A toy job.",
                                   iterations_flag=True),
                    sys.argv[1:])
    finally:
        print(f"ray started: {ray.is_initialized()}")
""")


def test_a_changed_config_is_refused_before_ray_starts_in_one_line_with_old_and_new_values(
        store, tmp_path, experiment_name):
    """A rerun with another config: exit 2 and one `prog: error:` line naming each changed field
    with its old -> new value and both ways forward, before a local Ray starts; no secret shown."""
    def url(password, port):
        return f"redis://:{password}@queue.internal:{port}/0"

    base = [f"experiment={experiment_name}", f"runs_dir={tmp_path}", f"engine_kwargs={{api_key: {SECRET}}}"]
    first = runner.parse(TOY, [*base, f"queue_url={url(REDIS_PASSWORD, 6380)}"])
    store.experiments.create(experiment_name, "toy", to_dict(first), config_hash=config_hash(first))
    script = tmp_path / "rerun.py"
    script.write_text(RERUN)
    env = os.environ | {"PYTHONPATH": str(Path(runner.__file__).parents[1])}
    env.pop("RAY_ADDRESS", None)  # a local run: Ray would start in the driver
    rotated = "sk-live-rotated-9876543210"
    proc = subprocess.run([sys.executable, str(script), f"experiment={experiment_name}", f"runs_dir={tmp_path}",
                           f"engine_kwargs={{api_key: {rotated}}}", f"queue_url={url('other-pass-5678', 6381)}",
                           "--iterations", "3"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert (proc.returncode, proc.stdout) == (2, "ray started: False\n"), proc.stderr
    assert proc.stderr.splitlines() == [
        f"python -m ray_jobs.toy: error: experiment={experiment_name!r} was run with another config (changed: "
        'iterations 1 -> 3, queue_url "redis://:***@queue.internal:6380/0" -> "redis://:***@queue.internal:6381/0"); '
        f"its archive and models belong to the old one. Run the new config under a new name "
        f"(experiment={experiment_name}-2), or pass --allow-config-change to continue this experiment with it "
        "(its archive and models carry on; the change is recorded)"]
    for secret in (SECRET, rotated, REDIS_PASSWORD, "other-pass-5678"):
        assert secret not in proc.stderr
    assert not (tmp_path / experiment_name).exists()  # no run dir, no config.yaml written
    assert store.experiments.get(experiment_name).config_hash == config_hash(first)


def test_a_dry_run_refuses_a_changed_config_that_the_run_would_refuse(store, tmp_path, experiment_name, capsys):
    """--dry-run said "checked" for a rerun that the run itself then refused (ConfigChanged)."""
    base = [f"experiment={experiment_name}", f"runs_dir={tmp_path}"]
    first = runner.parse(TOY, base)

    def dry_run(*extra: str) -> tuple[int, str, str]:
        try:
            runner.main(TOY, [*base, *extra, "--dry-run"])
            code = 0
        except SystemExit as e:
            code = e.code
        out, err = capsys.readouterr()
        return code, out, err

    assert dry_run("--iterations", "3")[1].endswith("checked (a new experiment); nothing started (--dry-run)\n")
    store.experiments.create(experiment_name, "toy", to_dict(first), config_hash=config_hash(first))
    assert "(its recorded config matches)" in dry_run()[1]
    code, _, err = dry_run("--iterations", "3")
    assert code == 2 and "was run with another config (changed: iterations 1 -> 3)" in err
    assert dry_run("--iterations", "3", "--allow-config-change")[0] == 0
    assert store.experiments.get(experiment_name).config_hash == config_hash(first)  # a dry run writes nothing


DRIVER = textwrap.dedent("""
    import sys, time
    from dataclasses import dataclass
    from jobs import runner

    @dataclass
    class Cfg:
        experiment: str = "x"
        runs_dir: str = "runs"

    def run(cfg, ctx):
        while True:  # a long job, until it is killed
            time.sleep(1)

    runner.main(runner.JobSpec(workload="toy", config_cls=Cfg, run=run, doc="A driver that runs until killed."),
                sys.argv[1:])
""")


def _driver(tmp_path: Path, experiment: str) -> subprocess.Popen:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    env = os.environ | {"PYTHONPATH": str(Path(runner.__file__).parents[1]), "RATCHET_LEASE_TTL_S": "2",
                        "RAY_ADDRESS": ray.get_runtime_context().gcs_address}
    return subprocess.Popen([sys.executable, str(script), f"experiment={experiment}", f"runs_dir={tmp_path}"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def test_a_second_driver_refuses_and_a_killed_driver_reads_killed(ray_local, store, tmp_path, experiment_name):
    cfg = runner.parse(TOY, [f"experiment={experiment_name}", f"runs_dir={tmp_path}", "iterations=7"])
    first = _driver(tmp_path, experiment_name)
    try:
        _until(lambda: store.experiments.names() and experiment_name in store.experiments.names()
               and store.experiments.get(experiment_name).status == "running", "the first driver runs")
        with pytest.raises(RuntimeError, match="already being run") as err:  # LeaseHeld
            runner.execute(TOY, cfg, store)
        assert f"pid {first.pid}" in str(err.value) and socket.gethostname() in str(err.value)
        assert "started" in str(err.value)
        assert "iterations" not in (tmp_path / experiment_name / "config.yaml").read_text()  # not overwritten
        first.kill()  # SIGKILL: no handler runs, nothing updates the record
        first.wait()
        _until(lambda: store.experiments.get(experiment_name).status == "killed", "the stale lease reads killed",
               timeout_s=60)
    finally:
        first.kill()
    with pytest.raises(ValueError, match="another config"):  # a restart is a rerun: the same config, or an explicit branch
        runner.execute(TOY, cfg, store)
    runner.execute(TOY, cfg, store, allow_config_change=True)
    assert store.experiments.get(experiment_name).status == "done"



@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stopped_driver_reads_killed_and_exits_without_a_stack_dump(ray_local, store, tmp_path, experiment_name,
                                                                     signum, code):
    stopped = _driver(tmp_path, experiment_name)
    try:
        _until(lambda: experiment_name in store.experiments.names()
               and store.experiments.get(experiment_name).status == "running", "the driver runs")
        stopped.send_signal(signum)  # SIGTERM as `ray job stop`, systemd and Kubernetes send; SIGINT as Ctrl-C
        _, err = stopped.communicate(timeout=60)
    finally:
        stopped.kill()
    name = signal.Signals(signum).name
    record = store.experiments.get(experiment_name)
    assert (record.status, record.error) == ("killed", f"Stopped: stopped by {name}")
    assert store.leases(experiment_name).holder() is None  # released at once, not after the TTL
    assert stopped.returncode == code  # 128 + the signal, as a shell reports it
    err = err.decode()
    assert f"toy stopped by {name}; its status is 'killed'" in err
    assert "Traceback" not in err and "SIGTERM received" not in err and "Stack" not in err, err


def test_a_job_longer_than_the_lease_ttl_keeps_its_lease(ray_local, store, tmp_path, experiment_name, monkeypatch):
    from store import lease as lease_mod

    monkeypatch.setattr(lease_mod, "LEASE_TTL_S", 0.6)  # renewed every 0.2 s by the runner's heartbeat
    key = lease_mod.lease_key(experiment_name)

    def long_run(cfg, ctx):
        renewals, last = 0, store.client.pttl(key)
        deadline = time.monotonic() + 60
        while renewals < 5:  # outlive the TTL several times over, watching the heartbeat renew it
            if time.monotonic() > deadline:
                raise AssertionError("the lease was not renewed")
            ttl = store.client.pttl(key)
            assert ttl > 0, "the lease expired while its job was running"
            renewals += ttl > last
            last = ttl
            time.sleep(0.02)
        return {"holder": store.leases(cfg.experiment).holder(), "status": store.experiments.get(cfg.experiment).status}

    spec = runner.JobSpec(workload="toy", config_cls=ToyConfig, run=long_run, doc="Long.")
    summary = runner.execute(spec, runner.parse(spec, [f"experiment={experiment_name}", f"runs_dir={tmp_path}"]),
                             store)
    assert summary["status"] == "running" and summary["holder"]["pid"] == os.getpid()
    assert store.leases(experiment_name).holder() is None  # released at the end
    assert store.experiments.get(experiment_name).status == "done"
