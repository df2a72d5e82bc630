"""The stand-in of vLLM's API (tests/fake_vllm) for the vLLM engine's tests, on machines
without vLLM: imported fresh for each test, checkpoint directories it loads, and the fixtures
`vllm`, `engine` (a GPU engine) and `cpu_engine` (tests/conftest.py registers them)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

FAKE_VLLM = Path(__file__).parent / "fake_vllm"


@pytest.fixture
def vllm(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The stand-in `vllm` package, imported fresh, with an empty fake GPU."""
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if k == "vllm" or k.startswith("vllm.")}
    monkeypatch.syspath_prepend(str(FAKE_VLLM))
    import vllm as fake

    assert Path(fake.__file__).is_relative_to(FAKE_VLLM)
    fake.reset_device()
    yield fake
    for k in [k for k in sys.modules if k == "vllm" or k.startswith("vllm.")]:
        del sys.modules[k]
    sys.modules.update(saved)


def checkpoint(root: Path, tag: str, *, layers: int = 2, finish_reason: str = "stop", eos=(2, 7, 9),
               weights: bool = True) -> str:
    """A checkpoint directory the stand-in loads: config, generation config, 'weights'."""
    path = root / tag
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "num_hidden_layers": layers, "max_position_embeddings": 64,
        "eos_token_id": 2, "_name_or_path": str(path),
    }))
    (path / "generation_config.json").write_text(json.dumps({"eos_token_id": list(eos)}))
    if weights:
        (path / "fake_weights.json").write_text(json.dumps({"tag": tag, "finish_reason": finish_reason}))
    return str(path)


@pytest.fixture
def engine(vllm, tmp_path):
    from search.engines.vllm_engine import VLLMEngine

    return VLLMEngine(checkpoint(tmp_path, "v0"), version="v0", gpu_memory_utilization=0.85)


@pytest.fixture
def cpu_engine(vllm, tmp_path, monkeypatch):
    from search.engines.vllm_engine import VLLMEngine

    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    vllm.reset_device("cpu")
    return VLLMEngine(checkpoint(tmp_path, "v0"), version="v0")
