"""common/failpoints.py with real processes: an armed point stops exactly one process, which
the drill finds by what it announced (not by its process title) and kills or releases; an
unarmed point, or a process outside a drill, passes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from common.failpoints import ENV_DIR, FailPoints

ROOT = Path(__file__).resolve().parents[1]
JOB = ("import sys\nfrom common.failpoints import failpoint\nprint('before', flush=True)\n"
       "failpoint('training_checkpoint', step=2)\nprint('after', flush=True)\n")


def job(points: FailPoints | None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != ENV_DIR} | {"PYTHONPATH": str(ROOT)}
    if points is not None:
        env |= points.env
    return subprocess.Popen([sys.executable, "-c", JOB], env=env, stdout=subprocess.PIPE, text=True)


def running(proc: subprocess.Popen):
    return lambda: proc.poll() is None


def test_a_process_outside_a_drill_or_at_an_unarmed_point_passes(tmp_path):
    points = FailPoints(tmp_path / "drill")
    for proc in (job(None), job(points)):
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0 and out.split() == ["before", "after"]
    assert points.hit("training_checkpoint") is None


def test_an_armed_point_stops_the_first_process_there_until_the_drill_kills_it(tmp_path):
    points = FailPoints(tmp_path / "drill")
    points.arm("training_checkpoint")
    proc = job(points)
    hit = points.wait_hit("training_checkpoint", running(proc))
    assert hit is not None and hit["pid"] == proc.pid and hit["step"] == 2 and proc.poll() is None
    assert not points.armed("training_checkpoint")  # taken: the next process passes
    os.kill(hit["pid"], signal.SIGKILL)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL and out.split() == ["before"]
    with pytest.raises(ProcessLookupError, match="no process waits"):
        points.release("training_checkpoint")
    again = job(points)  # a resumed training reaches the point again: it passes
    out, _ = again.communicate(timeout=60)
    assert again.returncode == 0 and out.split() == ["before", "after"]


def test_a_released_process_goes_on(tmp_path):
    points = FailPoints(tmp_path / "drill")
    points.arm("training_checkpoint")
    proc = job(points)
    assert points.wait_hit("training_checkpoint", running(proc))["pid"] == proc.pid
    points.release("training_checkpoint")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out.split() == ["before", "after"]


def test_two_processes_racing_for_one_armed_point_stop_one_of_them(tmp_path):
    points = FailPoints(tmp_path / "drill")
    points.arm("training_checkpoint")
    procs = [job(points), job(points)]
    hit = points.wait_hit("training_checkpoint", lambda: any(p.poll() is None for p in procs))
    stopped = next(p for p in procs if p.pid == hit["pid"])
    passed = next(p for p in procs if p.pid != hit["pid"])
    assert passed.wait(timeout=60) == 0 and stopped.poll() is None
    points.release("training_checkpoint")
    assert stopped.wait(timeout=60) == 0


def test_a_job_that_ends_without_reaching_the_point_is_no_hit(tmp_path):
    points = FailPoints(tmp_path / "drill")
    points.arm("sampler_batch")  # the job only reaches training_checkpoint
    proc = job(points)
    assert points.wait_hit("sampler_batch", running(proc)) is None
    assert proc.returncode == 0 and points.disarm("sampler_batch") and not points.disarm("sampler_batch")
    with pytest.raises(ValueError, match="letters, digits"):
        points.arm("../escape")


def test_a_drill_opens_its_points_in_a_nested_folder_again_and_again(tmp_path):
    """The cluster demo keeps one folder per run under its own (`failpoints/<experiment>`), and a
    drill that opens a run's points twice finds what it armed."""
    folder = tmp_path / "failpoints" / "tpo-lost"
    FailPoints(folder).arm("training_checkpoint")
    again = FailPoints(folder)
    assert again.armed("training_checkpoint") and again.env == {ENV_DIR: str(folder)}
