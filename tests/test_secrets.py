"""An engine's key never enters Ray's cluster state: it is named in engine_kwargs (api_key_env,
api_key_file) and read inside the sampler actor (common/secrets.py, search/pool_config.py); the
scan of Ray's GCS for it is drills/secret_scan.py's, which the cluster demo runs on three nodes."""

from __future__ import annotations

import os

import pytest

from common.procs import cmdline, pids, ppid
from common.secrets import literal_secrets, resolve_secret_refs
from drills.secret_scan import api_key_check
from search.pool import PoolConfig


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


def _gcs_pids() -> list[int]:
    """This test session's Ray GCS server(s): the process holding Ray's cluster state."""
    return [p for p in pids() if cmdline(p).split(b"\0")[0].endswith(b"gcs_server") and ppid(p) == os.getpid()]


def test_a_sampler_actor_reads_its_key_which_never_reaches_rays_cluster_state(ray_local, tmp_path):
    gcs = _gcs_pids()
    assert gcs, "no GCS server of this session's Ray found"
    # the actor read the key and sent it, in the one request of its one prompt; the GCS holds
    # every actor's creation task with its arguments (what GCS fault tolerance persists to
    # Redis, what the dashboard reads): the file's path is there, never the key
    assert api_key_check(tmp_path, gcs, prompts=1, n=2, num_cpus_per_actor=0.25) == {
        "completions": 2, "requests": 1, "endpoint_got_the_key": True, "gcs_holds_key_file_path": True,
        "key_not_in_gcs": True}
