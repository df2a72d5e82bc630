"""The vLLM engine's versions: a switch swaps weights in one engine (sleep mode on a GPU, in
place on a CPU), a failed one leaves the previous version serving, weights from memory reach
the workers; against the stand-in of vLLM's API (tests/fake_vllm)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _vllm_stand_in import checkpoint

from common.sampling import SamplingParams
from search.engines.vllm_engine import VLLMEngine

# --- loading -------------------------------------------------------------------------

SWAP_SEQUENCE = ["sleep", "wake_up:weights", "collective_rpc:reload_weights",
                 "wake_up:kv_cache", "reset_prefix_cache"]


def _calls(llm) -> list[str]:
    out = []
    for call in llm.calls:
        if call[0] == "wake_up":
            out.append("wake_up:" + ",".join(call[1]))
        elif call[0] == "collective_rpc":
            out.append("collective_rpc:" + call[1])
        else:
            out.append(call[0])
    return out


def test_version_switch_swaps_weights_in_one_engine(engine, vllm, tmp_path):
    llm = engine.llm
    engine.load(checkpoint(tmp_path, "v1"), version="v1")
    assert engine.llm is llm and engine.last_load_kind == "swap"
    assert _calls(llm) == SWAP_SEQUENCE and llm.calls[0] == ("sleep", 2)
    row = engine.generate(["x"], SamplingParams(max_tokens=12, temperature=0))[0]
    assert row[0].model_version == "v1" and row[0].text.startswith(" v1-")
    assert vllm.DEVICE["used"] == pytest.approx(0.85) and len(vllm.DEVICE["engines"]) == 1


@pytest.mark.parametrize("swap_weights", [True, False])
def test_reload_at_085_frees_the_old_engine_first(vllm, tmp_path, swap_weights):
    """A restart (another architecture, or swap_weights=False) must shut the old engine down:
    at 0.85 of the device two engines cannot coexist, and dropping the object frees nothing."""
    eng = VLLMEngine(checkpoint(tmp_path, "v0"), gpu_memory_utilization=0.85, swap_weights=swap_weights)
    old = eng.llm
    eng.load(checkpoint(tmp_path, "v1", layers=4 if swap_weights else 2), version="v1")
    assert eng.llm is not old and eng.last_load_kind == "restart"
    assert vllm.DEVICE["engines"] == [eng.llm] and vllm.DEVICE["used"] == pytest.approx(0.85)
    assert eng.generate(["x"], SamplingParams(max_tokens=12, temperature=0))[0][0].text.startswith(" v1-")


def test_failed_swap_leaves_the_previous_version_serving(engine, tmp_path):
    llm = engine.llm
    with pytest.raises(RuntimeError, match=r"in place failed: FileNotFoundError\('no weights.*still serves .*v0"):
        engine.load(checkpoint(tmp_path, "broken", weights=False), version="v1")
    assert engine.version == "v0" and engine.llm is llm and engine.checkpoint.endswith("v0")
    row = engine.generate(["x"], SamplingParams(max_tokens=12, temperature=0))[0]
    assert row[0].model_version == "v0" and row[0].text.startswith(" v0-")
    engine.load(checkpoint(tmp_path, "v2"), version="v2")  # and the next load still works
    assert engine.generate(["x"], SamplingParams(max_tokens=12))[0][0].text.startswith(" v2-")


def test_swap_on_a_vllm_without_in_place_reload_falls_back_to_a_fresh_engine(engine, vllm, tmp_path, monkeypatch):
    """If the workers cannot reload (another vLLM's API), the previous version still serves,
    from a fresh engine, and the error says how to switch in-place reload off."""
    old = engine.llm

    def no_such_method(method, *args, **kwargs):
        raise AttributeError(f"worker has no method {method!r}")

    monkeypatch.setattr(old, "collective_rpc", no_such_method)
    with pytest.raises(RuntimeError, match="swap_weights=False"):
        engine.load(checkpoint(tmp_path, "v1"), version="v1")
    assert engine.llm is not old and vllm.DEVICE["engines"] == [engine.llm]
    assert engine.version == "v0" and engine.generate(["x"], SamplingParams(max_tokens=12))[0][0].text.startswith(" v0-")


def test_failed_restart_with_a_failed_restore_stops_the_engine(engine, vllm, tmp_path):
    previous = Path(engine.checkpoint)
    (previous / "fake_weights.json").unlink()  # the previous checkpoint is gone from disk too
    with pytest.raises(FileNotFoundError):
        engine.load(checkpoint(tmp_path, "other", layers=8, weights=False), version="v1")
    assert engine.llm is None and engine.version is None and vllm.DEVICE["engines"] == []


def test_failed_restart_restores_the_previous_version(engine, vllm, tmp_path):
    with pytest.raises(FileNotFoundError, match="no weights"):
        engine.load(checkpoint(tmp_path, "other", layers=8, weights=False), version="v1")
    assert engine.version == "v0" and engine.context_length == 64
    assert engine.generate(["x"], SamplingParams(max_tokens=12))[0][0].text.startswith(" v0-")
    assert len(vllm.DEVICE["engines"]) == 1


def test_load_of_a_directory_without_config_touches_nothing(engine, tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json.*still serving 'v0'"):
        engine.load(str(tmp_path / "missing"))
    assert engine.llm.calls == [] and engine.version == "v0"


def test_close_gives_the_memory_back(engine, vllm):
    engine.close()
    assert vllm.DEVICE["used"] == pytest.approx(0.0) and engine.llm is None
    with pytest.raises(RuntimeError, match="no checkpoint loaded"):
        engine.generate(["x"], SamplingParams())


def test_cpu_version_switch_reloads_in_place_without_sleeping(cpu_engine, tmp_path):
    llm = cpu_engine.llm
    cpu_engine.load(checkpoint(tmp_path, "v1"), version="v1")
    assert cpu_engine.llm is llm and cpu_engine.last_load_kind == "swap"
    assert _calls(llm) == ["collective_rpc:reload_weights", "reset_prefix_cache"]
    assert llm.calls[0][3] == {"weights_path": cpu_engine.checkpoint}  # the path itself: no update_config
    assert cpu_engine.generate(["x"], SamplingParams(max_tokens=12, temperature=0))[0][0].text.startswith(" v1-")


def test_cpu_failed_switch_rolls_back_in_place(cpu_engine, tmp_path):
    llm = cpu_engine.llm
    with pytest.raises(RuntimeError, match=r"in place failed: FileNotFoundError\('no weights.*still serves .*v0"):
        cpu_engine.load(checkpoint(tmp_path, "broken", weights=False), version="v1")
    assert cpu_engine.llm is llm and cpu_engine.version == "v0"
    assert cpu_engine.generate(["x"], SamplingParams(max_tokens=12, temperature=0))[0][0].text.startswith(" v0-")


def _tag_weights(tag: str) -> dict:
    import torch

    return {"tag": torch.tensor(list(tag.encode()), dtype=torch.uint8), "w": torch.zeros(3)}


@pytest.mark.parametrize("platform", ["cpu", "cuda"])
def test_in_memory_weights_reach_the_workers_without_a_checkpoint(vllm, tmp_path, platform):
    vllm.reset_device(platform)
    eng = VLLMEngine(checkpoint(tmp_path, "v0"), version="v0", gpu_memory_utilization=0.5)
    llm = eng.llm
    eng.load_weights(_tag_weights("mem1"), version="v1", checkpoint=str(tmp_path / "v1-on-disk"))
    assert eng.llm is llm and eng.version == "v1" and eng.last_load_kind == "memory"
    assert eng.checkpoint == str(tmp_path / "v1-on-disk")
    (_, method, (path,), _), = [c for c in llm.calls if c[0] == "collective_rpc"]
    assert method == "ratchet_load_file" and path.startswith("/dev/shm/")  # RAM, not disk: tensors cannot cross vLLM's RPC
    assert not Path(path).exists()  # removed once the workers have the weights
    row = eng.generate(["x"], SamplingParams(max_tokens=12, temperature=0))[0]
    assert row[0].text.startswith(" mem1-") and row[0].model_version == "v1"


def test_bad_in_memory_weights_roll_back_to_the_checkpoint(cpu_engine):
    import torch

    with pytest.raises(RuntimeError, match=r"in-memory weights of v1 in place failed: KeyError.*still serves"):
        cpu_engine.load_weights({"w": torch.zeros(2)}, version="v1")
    assert cpu_engine.version == "v0"
    assert cpu_engine.generate(["x"], SamplingParams(max_tokens=12, temperature=0))[0][0].text.startswith(" v0-")
    with pytest.raises(RuntimeError, match="before load_weights"):
        VLLMEngine().load_weights({}, version="v1")
