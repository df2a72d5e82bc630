"""Stand-in for the `vllm` package (see ../README.md): LLM, SamplingParams, and a fake device.

A checkpoint for it is a directory with config.json (max_position_embeddings), optionally
generation_config.json, and fake_weights.json ({"tag": ..., "finish_reason": ...}): the
"weights", read at start-up and by reload_weights, so a checkpoint without them fails to load.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm.outputs import CompletionOutput, Logprob, RequestOutput
from vllm.platforms import current_platform, use_platform
from vllm.sampling_params import SamplingParams, StructuredOutputsParams

__all__ = ["LLM", "SamplingParams", "StructuredOutputsParams", "DEVICE", "reset_device"]

# The one fake GPU: the fraction of its memory that live engines hold. vLLM's start-up check
# fails when less than gpu_memory_utilization of the device is free.
DEVICE: dict[str, Any] = {"used": 0.0, "engines": []}


def reset_device(device_type: str = "cuda") -> None:
    DEVICE["used"] = 0.0
    DEVICE["engines"] = []
    use_platform(device_type)


class FakeTokenizer:
    """Character-level: token id = code point + 3; 1 = BOS, 2 = EOS."""

    bos_token_id, eos_token_id = 1, 2
    chat_template = None

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        ids = [ord(c) + 3 for c in text]
        return {"input_ids": ([self.bos_token_id] if add_special_tokens else []) + ids}

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i - 3) for i in ids if i > 2)


@dataclass
class ModelConfig:
    model: str
    max_model_len: int
    dtype: Any = None  # torch.float32 when the engine is built (torch is imported lazily)

    def __post_init__(self):
        import torch

        self.dtype = self.dtype or torch.float32


def _read_weights(path: str) -> dict[str, Any]:
    f = Path(path) / "fake_weights.json"
    if not f.is_file():
        raise FileNotFoundError(f"no weights in {path}: fake_weights.json is missing")
    return json.loads(f.read_text())


class _EngineCore:
    def __init__(self, llm: LLM):
        self.llm = llm

    def shutdown(self) -> None:
        self.llm._release()


class _LLMEngine:
    def __init__(self, llm: LLM, model_config: ModelConfig):
        self.model_config = model_config
        self.engine_core = _EngineCore(llm)


class LLM:
    def __init__(self, model: str, *, dtype: str = "auto", seed: int | None = 0,
                 gpu_memory_utilization: float = 0.9, max_model_len: int | None = None,
                 enforce_eager: bool = False, generation_config: str = "auto",
                 enable_sleep_mode: bool = False, **kwargs: Any):
        self.init_args = dict(model=model, dtype=dtype, seed=seed, gpu_memory_utilization=gpu_memory_utilization,
                              max_model_len=max_model_len, enforce_eager=enforce_eager,
                              generation_config=generation_config, enable_sleep_mode=enable_sleep_mode, **kwargs)
        # what vLLM's engine process reads from the environment at start-up (OMPProcessManager)
        self.start_env = {k: os.environ.get(k) for k in ("VLLM_CPU_NUM_OF_RESERVED_CPU",)}
        self.top_p_env = os.environ.get("RATCHET_VLLM_TOP_P_CANDIDATES")  # read by ratchet's worker module there
        self.cache_root_env = os.environ.get("VLLM_CACHE_ROOT")  # where vLLM keeps its compile cache
        if enable_sleep_mode and not current_platform.is_sleep_mode_available():
            raise ValueError("Sleep mode is not supported on current platform.")  # vllm/config/model.py
        if not 0 < gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
        free = 1.0 - DEVICE["used"]
        # vLLM's CPU worker checks the utilisation (of RAM) only when no KV cache size is given
        checked = current_platform.device_type != "cpu" or kwargs.get("kv_cache_memory_bytes") is None
        if checked and free + 1e-9 < gpu_memory_utilization:
            raise ValueError(
                f"Free memory on device ({free:.2f} of the device) on startup is less than desired GPU memory "
                f"utilization ({gpu_memory_utilization}). Decrease GPU memory utilization or reduce GPU memory "
                "used by other processes."
            )
        config_file = Path(model) / "config.json"
        if not config_file.is_file():
            raise OSError(f"{model} does not appear to have a file named config.json")
        config = json.loads(config_file.read_text())
        self._weights = _read_weights(model)
        DEVICE["used"] += gpu_memory_utilization
        DEVICE["engines"].append(self)
        self._memory = gpu_memory_utilization
        self._alive = True
        self._sleep_mode = enable_sleep_mode
        self._sleeping: set[str] = set()
        self._rng = random.Random(seed)
        self._extension = None  # worker_extension_cls, "module.Class" as vLLM's resolve_obj_by_qualname reads it
        if kwargs.get("worker_extension_cls"):
            import importlib

            module, _, name = kwargs["worker_extension_cls"].rpartition(".")
            self._extension = getattr(importlib.import_module(module), name)
        self.calls: list[tuple] = []  # every sleep/wake_up/collective_rpc/reset_prefix_cache call
        self.requests: list[tuple[Any, SamplingParams]] = []  # every (prompt, params) generated
        self.generate_calls = 0  # LLM.generate calls (a batch of requests is one)
        self.llm_engine = _LLMEngine(self, ModelConfig(model, max_model_len or int(config["max_position_embeddings"])))

    def get_tokenizer(self) -> FakeTokenizer:
        return FakeTokenizer()

    def _release(self) -> None:
        if self._alive:
            self._alive = False
            DEVICE["used"] -= self._memory
            DEVICE["engines"].remove(self)

    # --- sleep mode and in-place weight reload (docs/features/sleep_mode.md) ---

    def sleep(self, level: int = 1) -> None:
        if not self._sleep_mode:
            raise RuntimeError("sleep mode is not enabled: LLM(..., enable_sleep_mode=True)")
        self.calls.append(("sleep", level))
        self._sleeping = {"weights", "kv_cache"}
        if level == 2:
            self._weights = None  # discarded, not offloaded

    def wake_up(self, tags: list[str] | None = None) -> None:
        self.calls.append(("wake_up", tuple(tags or ())))
        self._sleeping -= set(tags or ("weights", "kv_cache"))

    def collective_rpc(self, method: str, timeout: float | None = None, args: tuple = (),
                       kwargs: dict[str, Any] | None = None) -> list[Any]:
        self.calls.append(("collective_rpc", method, args, kwargs))
        if method == "update_config":
            (overrides,) = args
            for name, values in overrides.items():
                if name not in {"load_config", "model_config"}:
                    raise AssertionError(f"Config `{name}` not supported. Allowed configs: load_config, model_config")
                if name == "model_config":
                    for key, value in values.items():
                        setattr(self.llm_engine.model_config, key, value)
            return [None]
        if method == "reload_weights":
            if "weights" in self._sleeping:
                raise RuntimeError("cannot load weights into sleeping (unmapped) memory: wake_up(tags=['weights']) first")
            path = (kwargs or {}).get("weights_path")
            if path is not None:  # vLLM >= 0.31: the workers' model config now points at it
                self.llm_engine.model_config.model = path
            self._weights = _read_weights(self.llm_engine.model_config.model)
            return [None]
        if self._extension is not None and hasattr(self._extension, method):  # as vLLM: the class mixed into workers
            from safetensors.torch import load_file

            weights = load_file(args[0])  # as search/engines/vllm_worker.py: a safetensors file
            if "tag" not in weights:
                raise KeyError("no tensor named 'tag' in the weights")
            self._weights = {"tag": bytes(int(x) for x in weights["tag"].tolist()).decode(), "finish_reason": "stop"}
            return [len(weights)]
        raise AttributeError(f"worker has no method {method!r}")

    def reset_prefix_cache(self) -> bool:
        self.calls.append(("reset_prefix_cache",))
        return True

    # --- generation ---

    def generate(self, prompts: Any, sampling_params: SamplingParams | list[SamplingParams] | None = None,
                 *, use_tqdm: bool = True, **kwargs: Any) -> list[RequestOutput]:
        if not self._alive:
            raise RuntimeError("engine is shut down")
        if self._sleeping or self._weights is None:
            raise RuntimeError(f"engine is sleeping ({sorted(self._sleeping)}): wake_up() first")
        self.generate_calls += 1
        prompts = [prompts] if isinstance(prompts, (str, dict)) else list(prompts)
        if sampling_params is None:
            sampling_params = SamplingParams()
        if isinstance(sampling_params, list) and len(sampling_params) != len(prompts):
            raise ValueError("The lengths of prompts and sampling_params must be the same.")
        tok = self.get_tokenizer()
        results = []
        for i, prompt in enumerate(prompts):
            params = sampling_params[i] if isinstance(sampling_params, list) else sampling_params
            if not isinstance(params, SamplingParams):
                raise TypeError(f"sampling_params must be vllm.SamplingParams, got {type(params).__name__}")
            self.requests.append((prompt, params))
            ids = prompt["prompt_token_ids"] if isinstance(prompt, dict) else tok(prompt)["input_ids"]
            outputs = [self._sample(ids, params, k) for k in range(params.n)]
            results.append(RequestOutput(str(len(self.requests)), prompt if isinstance(prompt, str) else None,
                                         ids, None, outputs, True))
        return results

    def _sample(self, prompt_ids: list[int], params: SamplingParams, k: int) -> CompletionOutput:
        """Text from the weights' tag and a draw: the request's own generator when it has a seed
        (as vLLM's per-request seeds), else the engine's; greedy depends on the prompt only."""
        if params.temperature < 1e-5:
            draw = int(hashlib.sha256(repr(prompt_ids).encode()).hexdigest(), 16) % 10**6
        elif params.seed is not None:
            draw = random.Random(f"{params.seed}:{k}:{prompt_ids}").randrange(10**6)
        else:
            draw = self._rng.randrange(10**6)
        text = f" {self._weights['tag']}-{draw}"[: params.max_tokens]
        tok = self.get_tokenizer()
        ids = tok(text, False)["input_ids"]
        logprobs = None
        if params.logprobs is not None:
            # As vLLM: the k most likely (rank 1..k) plus the sampled token, here ranked k + 1.
            logprobs = [{1000 + r: Logprob(-0.5 * (r + 1), r + 1, tok.decode([1000 + r])) for r in range(params.logprobs)}
                        | {t: Logprob(-9.0, params.logprobs + 1, tok.decode([t]))} for t in ids]
        return CompletionOutput(index=k, text=text, token_ids=ids, logprobs=logprobs,
                                finish_reason=self._weights.get("finish_reason", "stop"))
