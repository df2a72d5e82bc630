"""An engine's key never enters Ray's cluster state: it is named in engine_kwargs (api_key_env,
api_key_file) and read inside the sampler actor (common/secrets.py, search/pool_config.py)."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from common.procs import memory_holds
from common.sampling import SamplingParams
from common.secrets import literal_secrets, resolve_secret_refs
from search.pool import PoolConfig, SamplerPool


def test_a_key_in_engine_kwargs_is_refused_naming_the_field_and_the_fix():
    with pytest.raises(ValueError, match=r"engine_kwargs\.api_key holds a secret.*api_key_env=VAR"):
        PoolConfig(engine="openai", engine_kwargs={"base_url": "http://127.0.0.1:9/v1", "api_key": "sk-live-1234"})
    with pytest.raises(ValueError, match=r"engine_kwargs\.base_url holds a secret"):
        PoolConfig(engine="openai", engine_kwargs={"base_url": "http://user:pw-5678@127.0.0.1:9/v1"})
    # a name or a path is no secret; an empty key is none either
    cfg = PoolConfig(engine="openai", engine_kwargs={"base_url": "http://h:9/v1", "api_key_env": "MY_KEY",
                                                     "api_key": ""})
    assert literal_secrets(cfg.engine_kwargs) == []


def test_a_key_named_by_reference_is_read_where_the_engine_is_built(tmp_path):
    assert resolve_secret_refs({"api_key_env": "K", "n": 1}, env={"K": "sk-from-env"}) == {"api_key": "sk-from-env",
                                                                                           "n": 1}
    with pytest.raises(ValueError, match=r"engine_kwargs\.api_key_env=NOPE: the environment variable NOPE is not set"):
        resolve_secret_refs({"api_key_env": "NOPE"}, env={})
    key = tmp_path / "key"
    key.write_text("sk-from-file\n")
    key.chmod(0o644)
    with pytest.raises(ValueError, match=r"engine_kwargs\.api_key_file .* has mode 0644.*chmod 400"):
        resolve_secret_refs({"api_key_file": str(key)})
    key.chmod(0o400)
    assert resolve_secret_refs({"api_key_file": str(key)}) == {"api_key": "sk-from-file"}
    with pytest.raises(ValueError, match="give api_key or api_key_file, not both"):
        resolve_secret_refs({"api_key_file": str(key), "api_key": "x"})


class _Endpoint(BaseHTTPRequestHandler):
    """A real OpenAI-shaped /v1/completions endpoint that records the bearer tokens it gets."""

    seen: list[str] = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append(self.headers.get("Authorization", ""))
        choices = [{"index": i, "text": " 7", "finish_reason": "stop", "logprobs": None}
                   for i in range(len(body["prompt"]) * body.get("n", 1))]
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


def _gcs_pids() -> list[int]:
    """This test session's Ray GCS server(s): the process holding Ray's cluster state."""
    pids = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            argv0 = (p / "cmdline").read_bytes().split(b"\0")[0]
            ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if argv0.endswith(b"gcs_server") and ppid == os.getpid():
            pids.append(int(p.name))
    return pids


def test_a_sampler_actor_reads_its_key_which_never_reaches_rays_cluster_state(ray_local, tmp_path):
    key = f"sk-never-in-ray-{os.urandom(8).hex()}"
    path = tmp_path / "openai-key"
    path.write_text(key)
    path.chmod(0o400)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Endpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Endpoint.seen = []
    pool = SamplerPool(PoolConfig(engine="openai", num_cpus_per_actor=0.25, engine_kwargs={
        "base_url": f"http://127.0.0.1:{server.server_port}/v1", "model": "m", "api_key_file": str(path)}))
    try:
        import asyncio

        rows = asyncio.run(pool.generate(["2+5="], SamplingParams(n=2, max_tokens=4, seed=1)))
    finally:
        pool.shutdown()
        server.shutdown()
    assert [[c.text for c in r] for r in rows] == [[" 7", " 7"]]
    assert _Endpoint.seen == [f"Bearer {key}"]  # the actor read the key and sent it
    gcs = _gcs_pids()
    assert gcs, "no GCS server of this session's Ray found"
    # the GCS holds every actor's creation task with its arguments (what GCS fault tolerance
    # persists to Redis, what the dashboard reads): the file's path is there, never the key
    assert all(memory_holds(pid, str(path).encode()) for pid in gcs)
    assert not any(memory_holds(pid, key.encode()) for pid in gcs)
