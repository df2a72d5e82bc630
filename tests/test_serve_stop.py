"""`ratchet serve` stops cleanly on SIGTERM (what systemd, Docker and Kubernetes send) and on
Ctrl-C: no `*** SIGTERM received ***` native stack dump from Ray, no traceback, exit code 0, and
every Ray process it started gone.

The server runs as a real subprocess with a Ray of its own, under a temp dir of its own
(RAY_TMPDIR), so the test can see that Ray's processes ended and can clean up only its own.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest
from _ray_head import free_port, processes_under, stop_head

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "models" / "scaling-arith-seed"  # shipped: nothing to build
START_TIMEOUT_S = 300  # Ray, Serve and one sampler actor on a loaded 2-core machine


def _wait_until(check, what: str, timeout_s: float, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if proc.poll() is not None:
            pytest.fail(f"ratchet serve exited ({proc.returncode}) before {what}:\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s} s:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)


def _answers(url: str) -> bool:
    try:
        r = httpx.post(f"{url}/v1/completions", json={"prompt": "Q: 3+4\nA:", "max_tokens": 4, "seed": 0},
                       timeout=30)
        return r.status_code == 200 and len(r.json()["choices"]) == 1
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)])
def test_serve_stops_cleanly_on_a_stop_signal(signum, tmp_path):
    temp_dir = tempfile.mkdtemp(prefix="rs-", dir="/tmp")  # short: Ray's socket paths are length-limited
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a Ray of its own
    env |= {"RAY_TMPDIR": temp_dir, "PYTHONPATH": str(ROOT), "RATCHET_PROGRESS": "off"}
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ray_jobs.cli", "serve", f"model={MODEL}", f"port={port}",
             "sampler.num_actors=1", "sampler.num_cpus_per_actor=0.5", "sampler.engine_kwargs={num_threads: 1}"],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_until(lambda: _answers(f"http://127.0.0.1:{port}"), "it answers a completion", START_TIMEOUT_S,
                    proc, log)
        assert processes_under(temp_dir)  # Ray's processes run under the test's temp dir
        proc.send_signal(signum)
        code = proc.wait(timeout=180)
        text = log.read_text()
        name = signal.Signals(signum).name
        assert code == 0, text[-3000:]
        assert f"stopping ({name}): shutting down Serve and Ray" in text and text.rstrip().endswith("stopped"), text
        for dump in ("SIGTERM received", "Traceback", "Stack trace", "KeyboardInterrupt", "will be retried"):
            assert dump not in text, text
        deadline = time.monotonic() + 60  # ray.shutdown has signalled them; their exits are reaped
        while processes_under(temp_dir) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert processes_under(temp_dir) == []
    finally:
        proc.kill()
        stop_head(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
