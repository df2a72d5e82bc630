"""Sampler engines: one protocol, three backends, picked by name from one registry.

    engine = make_engine("transformers", checkpoint="/ckpt/v0")
    results = engine.generate(["map 3 1 4 =>"], SamplingParams(n=4, temperature=1.0))

The registry maps names to "module:Class" so that building one engine never imports the
others' heavy dependencies (vLLM exists only on GPU machines).
"""

from __future__ import annotations

import importlib
from typing import Any

from common.secrets import resolve_secret_refs
from search.engines.base import Engine

ENGINES: dict[str, str] = {
    "transformers": "search.engines.hf:TransformersEngine",
    "vllm": "search.engines.vllm_engine:VLLMEngine",
    "openai": "search.engines.openai_engine:OpenAIEngine",
}


def engine_class(name: str) -> type:
    if name not in ENGINES:
        raise ValueError(f"engine {name!r} is unknown; choose one of {sorted(ENGINES)}")
    module, _, cls = ENGINES[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def make_engine(name: str, **kwargs: Any) -> Engine:
    """Build the engine registered as `name` with its keyword arguments; a secret given by
    reference (`api_key_env: VAR`, `api_key_file: PATH`) is read here (common.secrets)."""
    return engine_class(name)(**resolve_secret_refs(kwargs, "engine_kwargs"))


__all__ = ["ENGINES", "Engine", "engine_class", "make_engine"]
