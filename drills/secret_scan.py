"""Where a secret must never be, looked for: Ray's GCS (the process that keeps every actor's
arguments and every job's runtime env), Ray's record of each job, and the jobs' logs.

    api_key_check(tmp_dir, [gcs_pid], num_cpus_per_actor=0.25)   # an engine's key, read inside the actors
    password_check(cluster, jobs, logs)                          # the Redis password of a cluster's jobs

Each check has a positive control beside the negative one: the GCS is shown to hold the path
of the file the secret is in, so a scan that saw nothing at all cannot pass. tests/test_secrets.py
runs api_key_check on a test session's Ray, tests/_cluster_probe.py and drills/cluster_demo.py on
a cluster of three nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from common.procs import memory_holds
from common.sampling import SamplingParams
from drills.local_cluster import LocalCluster

# api_key_check's pool on a cluster's two worker nodes: an actor on each, one prompt per request
ON_TWO_WORKERS = {"num_actors": 2, "num_cpus_per_actor": 0.5, "prompts_per_request": 1, "scheduling_strategy": "SPREAD"}

class _Completions(BaseHTTPRequestHandler):
    """A real OpenAI-shaped /v1/completions endpoint: " 7" for every prompt and sample; it
    records the bearer tokens it is sent."""

    seen: list[str] = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append(self.headers.get("Authorization", ""))
        prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
        choices = [{"index": i, "text": " 7", "finish_reason": "stop", "logprobs": None}
                   for i in range(len(prompts) * body.get("n", 1))]
        data = json.dumps({"id": "c", "object": "text_completion", "created": 0, "model": body["model"],
                           "choices": choices, "usage": {"prompt_tokens": 1, "completion_tokens": len(choices),
                                                         "total_tokens": 1 + len(choices)}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def completions_endpoint() -> Iterator[str]:
    """A local OpenAI-compatible endpoint on 127.0.0.1; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Completions)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Completions.seen = []
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1"
    finally:
        server.shutdown()


def api_key_check(key_dir: Path, gcs: Sequence[int], prompts: int = 8, n: int = 1, **pool: Any) -> dict[str, Any]:
    """An engine's API key: sampler actors (a SamplerPool of the PoolConfig fields `pool`) read it
    from a 0400 file in `key_dir` named in engine_kwargs (`api_key_file`) and send it; the GCS
    (the processes `gcs`), which keeps every actor's arguments, holds the file's path and never
    the key. Needs ray.init. Returns what was answered and sent, and the two GCS scans."""
    from search.pool import PoolConfig, SamplerPool

    key = f"sk-never-in-ray-{secrets.token_hex(12)}"
    path = key_dir / "openai-key"
    path.write_text(key)
    path.chmod(0o400)
    with completions_endpoint() as base_url:
        sampler = SamplerPool(PoolConfig(engine="openai", **pool,
                                         engine_kwargs={"base_url": base_url, "model": "m", "api_key_file": str(path)}))
        try:
            rows = asyncio.run(sampler.generate([f"{i}+1=" for i in range(prompts)],
                                                SamplingParams(n=n, max_tokens=2)))
        finally:
            sampler.shutdown()
        seen = list(_Completions.seen)
    return {"completions": sum(len(r) for r in rows), "requests": len(seen),
            "endpoint_got_the_key": bool(seen) and all(s == f"Bearer {key}" for s in seen),
            "gcs_holds_key_file_path": all(memory_holds(pid, str(path).encode()) for pid in gcs),
            "key_not_in_gcs": not any(memory_holds(pid, key.encode()) for pid in gcs)}


def password_check(cluster: LocalCluster, jobs: list[str], logs: list[str]) -> dict[str, bool]:
    """The cluster's Redis password in none of: the GCS's memory, Ray's records of `jobs`, their `logs`."""
    password = cluster.redis.password.encode()
    gcs = cluster.gcs_pid()
    return {
        # the positive control: the GCS holds the jobs' runtime env (the URL file's path)...
        "gcs_holds_url_file_path": memory_holds(gcs, str(cluster.url_file).encode()),
        # ... and never the password the file holds
        "password_not_in_gcs": not memory_holds(gcs, password),
        "password_not_in_job_records": not any(cluster.redis.password in cluster.job_record(j) for j in jobs),
        "password_not_in_job_logs": not any(cluster.redis.password in text for text in logs),
    }
