"""`ratchet serve`'s typed config and how it becomes the deployment's settings.

Here, not in the job file, so that ray_jobs/serve.py only wires (parse -> Ray -> Serve -> wait
for a stop), as the other job files do. The API key is read from the environment or a 0400
file when the settings are built, never from the config itself, so it never reaches a config
file, a log line or Ray's cluster state (replicas get only its hash).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from common.config import ConfigError
from common.secrets import secret_from_environment
from search.pool import PoolConfig
from search.serve.deployment import ServeSettings
from search.serve.guard import (
    API_KEY_ENV,
    API_KEY_FILE_ENV,
    api_key_from_environment,
    read_api_key_file,
)
from search.serve.limits import ServeLimits
from search.serve.protocol import ReasoningSplit
from training import pretrained

# the old --flags and the one name each has now
OLD_FLAGS = {
    "--model": "model=PATH", "--experiment": "experiment=NAME", "--version": "version=v2",
    "--model-name": "model_name=NAME", "--engine": "sampler.engine=NAME",
    "--engine-kwargs": "sampler.engine_kwargs={...}", "--actors": "sampler.num_actors=N",
    "--cpus-per-actor": "sampler.num_cpus_per_actor=X", "--host": "host=0.0.0.0", "--port": "port=8000",
    "--reasoning": "thought_marker=MARKER response_marker=MARKER", "--api-key-env": "api_key_env=VAR",
    "--api-key-file": "api_key_file=PATH", "--allow-no-auth": "allow_no_auth=true", "--limits": "limits={...}",
}


@dataclass
class ServeConfig:
    model: str = ""  # a Hugging Face checkpoint dir to serve (or set experiment instead)
    experiment: str = ""  # serve a model registry version of this experiment (instead of model)
    version: str = ""  # registry version of experiment (default: its current one)
    # the id clients send as "model" (default: the experiment, or the dir's name; pretrained:<name>
    # serves as <name> and answers to pretrained:<name> and its converted dir's name as well)
    model_name: str = ""
    sampler: PoolConfig = field(default_factory=PoolConfig)  # engine, engine_kwargs, Ray actors (search/pool.py)
    # the model that gives `search` requests their verdicts, in a pool of its own beside the sampler's
    # (same settings): a checkpoint dir, pretrained:<name>, or a LoRA adapter dir such as
    # models/smollm2-verifier-lora (merged into its base once). "" or the model itself: the model verifies
    verifier: str = ""
    verifier_name: str = ""  # the id /v1/models lists it as (default: the verifier dir's name)
    host: str = "127.0.0.1"  # 0.0.0.0 to accept other machines
    port: int = 8000
    # a thinking model (both set): chat answers carry the text after thought_marker in
    # reasoning_content and the text after response_marker in content (e.g. Work: and So:)
    thought_marker: str = ""
    response_marker: str = ""
    # the bearer token to require, never in the config itself: the environment variable named
    # here, or a file readable by its owner only (chmod 400, as Kubernetes mounts secrets);
    # default: $RATCHET_API_KEY, or the file named by $RATCHET_API_KEY_FILE
    api_key_env: str = ""
    api_key_file: str = ""
    allow_no_auth: bool = False  # serve a non-loopback host without an API key (anyone who reaches it may sample)
    limits: dict[str, Any] = field(default_factory=dict)  # request caps (search/serve/limits.py), e.g. {max_n: 16}
    chat_max_tokens: int = 256  # max_tokens of chat requests that set none

    renamed_fields: ClassVar[dict[str, str]] = {"actors": "sampler.num_actors", "num_actors": "sampler.num_actors",
                                                "engine": "sampler.engine", "engine_kwargs": "sampler.engine_kwargs"}

    def __post_init__(self):
        if bool(self.model) == bool(self.experiment):
            raise ValueError("serve needs exactly one model source: model=PATH (a checkpoint dir) or "
                             "experiment=NAME (its registry's current version, or version=vN)")
        if self.version and not self.experiment:
            raise ValueError("version names a registry version: set experiment=NAME with it, not model")
        if bool(self.thought_marker) != bool(self.response_marker):
            raise ValueError("thought_marker and response_marker go together: set both (a thinking model) or neither")
        if not 0 < self.port < 65536:
            raise ValueError(f"port={self.port} must be in 1..65535")
        if self.api_key_env and self.api_key_file:
            raise ValueError("api_key_env and api_key_file: give one of them")
        if self.verifier_name and not self.verifier:
            raise ValueError("verifier_name names the verifier: set verifier=PATH with it")


def old_flag(argv: list[str]) -> str | None:
    """The error for a --flag serve no longer takes, naming its field=value form; else None."""
    for arg in argv:
        flag = arg.split("=", 1)[0]
        if flag in OLD_FLAGS:
            return (f"{flag} is gone: write {OLD_FLAGS[flag]} (serve takes --config and field=value "
                    "overrides like every job; --help lists the fields)")
    return None


def served_names(cfg: ServeConfig, checkpoint: str) -> tuple[str | None, tuple[str, ...]]:
    """(model_name, aliases). A pinned model (model=pretrained:<name>) is served as <name> and also
    answers to `pretrained:<name>` (what a job's config names it) and to its converted directory's
    name; model_name=NAME names any model alone; else (None) the experiment or the dir's name."""
    if cfg.model_name or not cfg.model.startswith(pretrained.PREFIX):
        return cfg.model_name or None, ()
    name = cfg.model[len(pretrained.PREFIX):]
    return name, tuple(dict.fromkeys(a for a in (cfg.model, Path(checkpoint.rstrip("/")).name) if a != name))


def settings_from(cfg: ServeConfig, env: Mapping[str, str] | None = None, checkpoint: str | None = None,
                  verifier: str | None = None) -> ServeSettings:
    """The deployment's settings; the API key is read from the environment or a 0400 file.
    `checkpoint`: the dir cfg.model resolved to (a pinned model's, once fetched); default cfg.model.
    `verifier`: the dir cfg.verifier resolved to (an adapter's merged checkpoint); default cfg.verifier."""
    env = os.environ if env is None else env
    try:
        limits = ServeLimits.from_dict(cfg.limits)
        api_key = _api_key(cfg, env)
    except (ValueError, TypeError) as e:
        raise ConfigError(str(e)) from None
    if api_key is None and not _loopback(cfg.host) and not cfg.allow_no_auth:
        raise ConfigError(f"host={cfg.host} accepts other machines, and no API key is set: set ${API_KEY_ENV} "
                          f"(or ${API_KEY_FILE_ENV}, api_key_env=VAR, api_key_file=PATH), or allow_no_auth=true")
    pool = replace(cfg.sampler, experiment=cfg.experiment or None)
    checkpoint = checkpoint or cfg.model or None
    model_name, aliases = served_names(cfg, checkpoint or "")
    verifier = None if not cfg.verifier or cfg.verifier == cfg.model else (verifier or cfg.verifier)
    verifier_name = (cfg.verifier_name or Path(cfg.verifier.rstrip("/")).name) if verifier else None
    return ServeSettings(pool=pool, checkpoint=checkpoint, version=cfg.version or None,
                         model_name=model_name, aliases=aliases, api_key=api_key, limits=limits,
                         verifier=verifier, verifier_name=verifier_name,
                         chat_max_tokens=cfg.chat_max_tokens,
                         reasoning=ReasoningSplit(cfg.thought_marker, cfg.response_marker)
                         if cfg.thought_marker else None)


def _api_key(cfg: ServeConfig, env: Mapping[str, str]) -> str | None:
    if cfg.api_key_file:
        return read_api_key_file(cfg.api_key_file)
    if cfg.api_key_env:
        key = secret_from_environment(cfg.api_key_env, env=env)
        if key is None:
            raise ValueError(f"api_key_env={cfg.api_key_env}: that environment variable is empty or unset; "
                             "export it before starting serve")
        return key
    return api_key_from_environment(env)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False
