"""A Ray head of a test's own, for `ray job submit` tests.

`ray stop` kills every Ray process of the user on the machine, so a test that ended with it
also killed any other Ray job running beside it (a demo, another test session). This head
runs under a temp dir of its own, and stopping it signals only the processes started under
that dir.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator

from common.ports import free_port
from common.procs import pids_naming


def processes_under(temp_dir: str) -> list[int]:
    """Pids whose command line names `temp_dir` (Ray passes its session dir to every process)."""
    return pids_naming(temp_dir)


def stop_head(temp_dir: str) -> None:
    for pid in processes_under(temp_dir):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def ray_head(env: dict[str, str]) -> Iterator[str]:
    """Start a head (2 CPUs, dashboard on loopback); yields the job API address."""
    temp_dir = tempfile.mkdtemp(prefix="rh-", dir="/tmp")  # short: Ray's socket paths are length-limited
    gcs_port, dashboard_port = free_port(), free_port()
    head = subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--num-cpus=2",
                           f"--port={gcs_port}", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}",
                           f"--temp-dir={temp_dir}", "--disable-usage-stats"], env=env, capture_output=True, text=True)
    try:
        assert head.returncode == 0, head.stderr
        yield f"http://127.0.0.1:{dashboard_port}"
    finally:
        stop_head(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
