"""A multi-node Ray cluster on one machine, as Ray's maintainers test one: a head and worker
nodes (`ray.cluster_utils.Cluster`: a raylet each, with resources of its own), one Redis over
TCP with a password whose URL is in a 0600 file (RATCHET_REDIS_URL_FILE), a storage dir every
node reads, and the job server (the dashboard) on loopback.

    with LocalCluster(Path("/tmp/rcd"), workers=2) as c:
        job = c.submit(["python", "-m", "ray_jobs.scaling", "--config", "configs/scaling-demo.yaml"])
        c.remove(c.node_of(pid))         # SIGKILL a worker node's raylet and everything it started
        c.wait(job)

Each node keeps the runtime envs it unpacks (the job's --working-dir) in a directory of its
own, as separate machines would: the nodes share one session dir here, and a node that
deleted a working dir it no longer used would delete it under another node's running job.

Everything is on 127.0.0.1: Ray turns a loopback address into the machine's outward one
unless RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, which here only makes it keep 127.0.0.1 (the
cluster_utils nodes do not read it otherwise). Every process lives under this cluster's own
temp dir and is stopped by `close()`: never `ray stop`, which stops every Ray of the user.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from common.ports import free_port
from common.procs import descendants, lineage, pids_naming

ROOT = Path(__file__).resolve().parents[1]
HEAD_RESOURCES = {"head": 1}
WORKER_CPUS = 4  # logical: a worker left alone must hold every actor and the training task
OBJECT_STORE = 200 * 1024 * 1024
NO_AGENT = "No available agent to submit job"  # the job server's answer before its agent registered
AGENT_WAIT_S = 120  # how long a submission waits for a (new) head's agent


def _state(pid: int) -> str:
    """A process's state letter (Z: a zombie, dead but not reaped), or "" when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return ""


def runtime_env_for(url_file: Path, out: Path, pip: bool = True) -> Path:
    """deploy/runtime_env.yaml with this cluster's URL file; without `pip` its pip line goes,
    as the recipe says for nodes that have the packages."""
    env = yaml.safe_load((ROOT / "deploy" / "runtime_env.yaml").read_text())
    env["env_vars"]["RATCHET_REDIS_URL_FILE"] = str(url_file)
    if not pip:
        env.pop("pip", None)  # else relative, as written: `ray job submit` reads it from the repository
    out.write_text(yaml.safe_dump(env, sort_keys=False))
    return out


class LocalCluster:
    def __init__(self, base: Path, workers: int = 2, worker_cpus: int = WORKER_CPUS, pip: bool = False):
        self.base, self.redis, self.ray, self.pip, self._added = base, None, None, pip, 0
        self.ray_tmp = base / "ray"  # short: Ray's socket paths are length-limited
        self._environ = dict(os.environ)
        try:
            self._start(workers, worker_cpus)
        except BaseException:
            self.close()  # what did start: nothing of a half-built cluster is left running
            raise

    def _start(self, workers: int, worker_cpus: int) -> None:
        from store.tcp import start_tcp_server, write_url_file

        base = self.base
        base.mkdir(parents=True, exist_ok=True)
        self.storage = base / "shared"  # every node reads it (one machine: one disk)
        self.storage.mkdir(exist_ok=True)
        self.worker_cpus = worker_cpus
        self.redis = start_tcp_server(base / "redis", host="127.0.0.1", port=free_port())
        self.url_file = base / "etc" / "redis-url"
        write_url_file(self.redis.url, self.url_file)
        self.runtime_env = runtime_env_for(self.url_file, base / "runtime_env.yaml", pip=self.pip)
        # what `ray start` would see on every node: no Redis URL (the jobs read the file), the
        # virtualenv's python first on PATH (a job's entrypoint `python`), loopback only
        for name in ("RATCHET_REDIS_URL", "RATCHET_REDIS_URL_FILE", "RAY_ADDRESS"):
            os.environ.pop(name, None)
        os.environ |= {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_TMPDIR": str(base),
                       "RAY_USAGE_STATS_ENABLED": "0",
                       # a lost node is declared dead after ~3 s of missed health checks, not ~15 s
                       "RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "3",
                       "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
        self._start_ray(workers)

    def _start_ray(self, workers: int) -> None:
        """A head (the job server, the drivers, no CPUs) and `workers` worker nodes."""
        from ray.cluster_utils import Cluster

        self.dashboard_port = free_port()
        self.ray = Cluster(initialize_head=True, shutdown_at_exit=True, head_node_args=dict(
            num_cpus=0, resources=HEAD_RESOURCES, include_dashboard=True, dashboard_host="127.0.0.1",
            dashboard_port=self.dashboard_port, temp_dir=str(self.ray_tmp), node_ip_address="127.0.0.1",
            object_store_memory=OBJECT_STORE, runtime_env_dir_name="runtime_resources_head"))
        self.names: dict[Any, str] = {self.ray.head_node: "head"}
        for _ in range(workers):
            self.add_worker()

    @property
    def job_address(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    @property
    def gcs_address(self) -> str:
        return self.ray.address

    def add_worker(self) -> Any:
        """A worker node `w<k>` with WORKER_CPUS logical CPUs and a resource named after it."""
        self._added += 1
        name = f"w{self._added}"
        node = self.ray.add_node(num_cpus=self.worker_cpus, resources={name: 1}, node_ip_address="127.0.0.1",
                                 object_store_memory=OBJECT_STORE, runtime_env_dir_name=f"runtime_resources_{name}")
        self.names[node] = name
        return node

    def workers(self) -> list[Any]:
        return list(self.ray.worker_nodes)

    def raylet_pid(self, node: Any) -> int:
        return node.all_processes["raylet"][0].process.pid

    def node_of(self, pid: int) -> Any | None:
        """The node whose raylet started `pid` (a worker process: an actor or a task)."""
        raylets = {self.raylet_pid(n): n for n in [self.ray.head_node, *self.ray.worker_nodes]}
        return next((raylets[p] for p in lineage(pid) if p in raylets), None)

    def remove(self, node: Any) -> str:
        """Lose a worker node: SIGKILL its raylet and the processes it started (no graceful
        shutdown), as a machine that dies. Returns the node's name."""
        if node is self.ray.head_node:
            raise ValueError("the head node holds the cluster's state and the job's driver: remove a worker")
        self.ray.remove_node(node, allow_graceful=False)
        return self.names[node]

    def lose_head(self) -> None:
        """Lose the head machine: SIGKILL its GCS, job server and the drivers on it, and the
        worker nodes with it (without a GCS they stop serving; a worker's raylet would exit
        after a minute of reconnecting). Redis and the storage dir stay: the durable state."""
        workers = len(self.ray.worker_nodes)
        # every Ray process and all they started: Ray names its temp dir to each process it starts,
        # but some retitle themselves (`ray::DashboardAgent`, actors); those are found as descendants
        roots = set(pids_naming(str(self.ray_tmp)))
        doomed = descendants(roots)
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in doomed:  # all gone at once, as with a machine: their ports are free for the new head
            while _state(pid) not in ("", "Z"):
                time.sleep(0.01)
        self._start_ray(workers)  # a new head, and its workers joining it

    def kill_redis(self) -> float:
        """SIGKILL redis-server, then start it again from its config (same port, password and
        append-only file), as its supervisor would; returns the seconds it was away."""
        from store.tcp import restart_tcp_server

        started = time.monotonic()
        os.kill(self.redis.pid, signal.SIGKILL)
        while Path(f"/proc/{self.redis.pid}").exists() and _state(self.redis.pid) != "Z":
            time.sleep(0.01)  # the port is free once the process is gone
        self.redis = restart_tcp_server(self.redis)
        return time.monotonic() - started

    def gcs_pid(self) -> int:
        return self.ray.head_node.all_processes["gcs_server"][0].process.pid

    # --- jobs, through the job server as the README's recipe submits them ---------------------
    def submit_argv(self, entrypoint: list[str], submission_id: str, runtime_env: Path | None = None) -> list[str]:
        return [sys.executable, "-m", "ray.scripts.scripts", "job", "submit", "--address", self.job_address,
                "--working-dir", ".", "--runtime-env", str(runtime_env or self.runtime_env),
                "--submission-id", submission_id, "--no-wait", "--", *entrypoint]

    def runtime_env_with(self, env_vars: dict[str, str], name: str) -> Path:
        """The cluster's runtime env with more env_vars (a drill's, for one job's processes)."""
        env = yaml.safe_load(self.runtime_env.read_text())
        env["env_vars"] |= env_vars
        out = self.base / f"runtime_env-{name}.yaml"
        out.write_text(yaml.safe_dump(env, sort_keys=False))
        return out

    def submit(self, entrypoint: list[str], submission_id: str, env_vars: dict[str, str] | None = None) -> str:
        """`ray job submit` as the recipe writes it; `env_vars` join the runtime env for this job only."""
        runtime_env = self.runtime_env_with(env_vars, submission_id) if env_vars else None
        deadline = time.monotonic() + AGENT_WAIT_S
        while True:
            r = subprocess.run(self.submit_argv(entrypoint, submission_id, runtime_env), cwd=ROOT, capture_output=True,
                               text=True, timeout=300)
            # a new head's job server answers before its agent has registered: Ray says to try again
            if r.returncode == 0 or NO_AGENT not in r.stderr or time.monotonic() > deadline:
                break
            time.sleep(1)  # the job server reports no agent yet; it has no call to wait on one
        if r.returncode != 0:
            raise RuntimeError(f"ray job submit failed ({r.returncode}): {r.stderr[-2000:]}")
        return submission_id

    def client(self) -> Any:
        from ray.job_submission import JobSubmissionClient

        return JobSubmissionClient(self.job_address)

    def status(self, job: str) -> str:
        return str(self.client().get_job_status(job).value)

    def wait(self, job: str, timeout_s: float = 3600) -> str:
        deadline = time.monotonic() + timeout_s
        while (status := self.status(job)) not in ("SUCCEEDED", "FAILED", "STOPPED"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job} still {status} after {timeout_s}s")
            time.sleep(1)  # polling the job server for a state it reports
        return status

    def logs(self, job: str) -> str:
        return self.client().get_job_logs(job)

    def job_record(self, job: str) -> str:
        """What Ray keeps of the job (entrypoint, runtime env, metadata), as JSON text."""
        info = self.client().get_job_info(job)
        return json.dumps({"entrypoint": info.entrypoint, "runtime_env": info.runtime_env,
                           "metadata": info.metadata}, default=str)

    def close(self) -> None:
        if self.ray is not None:
            with contextlib.suppress(Exception):
                self.ray.shutdown()
        for pid in pids_naming(str(self.ray_tmp)):  # anything of this cluster's left
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        from store.tcp import stop_tcp_server

        if self.redis is not None:
            with contextlib.suppress(Exception):
                stop_tcp_server(self.redis)
        os.environ.clear()
        os.environ.update(self._environ)
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

