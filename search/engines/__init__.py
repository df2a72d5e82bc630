"""Sampler engines: one protocol, three backends, picked by name from one registry.

    engine = make_engine("transformers", checkpoint="/ckpt/v0")
    results = engine.generate(["map 3 1 4 =>"], SamplingParams(n=4, temperature=1.0))

The registry maps names to "module:Class" so that building one engine never imports the
others' heavy dependencies (vLLM exists only on GPU machines).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from common.secrets import resolve_secret_refs
from search.engines.base import Engine

ENGINES: dict[str, str] = {
    "transformers": "search.engines.hf:TransformersEngine",
    "vllm": "search.engines.vllm_engine:VLLMEngine",
    "openai": "search.engines.openai_engine:OpenAIEngine",
}

# The packages each engine imports when it starts (search.engines.checks finds them before a job does).
ENGINE_PACKAGES: dict[str, tuple[str, ...]] = {
    "transformers": ("torch", "transformers"),
    "vllm": ("vllm",),
    "openai": ("openai",),
}


def engine_class(name: str) -> type:
    if name not in ENGINES:
        raise ValueError(f"engine {name!r} is unknown; choose one of {sorted(ENGINES)}")
    module, _, cls = ENGINES[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def engine_arguments(name: str) -> list[str] | None:
    """The keyword arguments engine `name` takes (None: any, it has **kwargs)."""
    params = list(inspect.signature(engine_class(name).__init__).parameters.values())[1:]  # after self
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.name != "checkpoint"]


def required_arguments(name: str) -> list[str]:
    """The keyword arguments engine `name` cannot start without (the checkpoint aside)."""
    params = list(inspect.signature(engine_class(name).__init__).parameters.values())[1:]
    return [p.name for p in params if p.default is p.empty and p.name != "checkpoint"
            and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]


def check_engine_kwargs(name: str, kwargs: dict[str, Any], field: str = "sampler.engine_kwargs") -> None:
    """Refuse arguments engine `name` does not take, before any actor starts: an actor given one
    fails in its constructor and Ray restarts it again and again. A secret by reference
    (`api_key_env`, `api_key_file`) counts as its argument."""
    known = engine_arguments(name)
    if known is None:
        return
    unknown = sorted(k for k in kwargs if k not in known
                     and not (k.endswith(("_env", "_file")) and k.rsplit("_", 1)[0] in known))
    if unknown:
        raise ValueError(f"{field} {unknown} are not arguments of the {name} engine (sampler.engine={name!r}); "
                         f"it takes {sorted(known)}. Arguments of another engine (e.g. vLLM's "
                         "gpu_memory_utilization) belong with that engine: change sampler.engine or remove them")


def make_engine(name: str, **kwargs: Any) -> Engine:
    """Build the engine registered as `name` with its keyword arguments; a secret given by
    reference (`api_key_env: VAR`, `api_key_file: PATH`) is read here (common.secrets)."""
    return engine_class(name)(**resolve_secret_refs(kwargs, "engine_kwargs"))


__all__ = ["ENGINES", "ENGINE_PACKAGES", "Engine", "check_engine_kwargs", "engine_arguments", "engine_class",
           "make_engine", "required_arguments"]
