"""`ratchet serve`: an OpenAI-compatible endpoint (Ray Serve + SamplerPool) for a checkpoint.

    # local: a checkpoint dir, or a registry version of an experiment
    ratchet serve model=~/.ratchet/models/seed-tiny-<hash> port=8000
    ratchet serve experiment=tpo-demo thought_marker=Work: response_marker=So:  # -> reasoning_content
    RATCHET_API_KEY=$(openssl rand -hex 32) ratchet serve experiment=demo version=v2   # bearer token
    RATCHET_API_KEY_FILE=/run/secrets/ratchet ratchet serve model=PATH host=0.0.0.0    # a 0400 file
    ratchet serve model=PATH limits='{max_n: 16, max_body_bytes: 65536}'              # request caps
    ratchet serve --config my-serve.yaml sampler.num_actors=2      # the jobs' CLI: YAML + overrides
    curl localhost:8000/v1/completions -H 'Content-Type: application/json' \\
        -d '{"prompt": "map 3 1 4 =>", "n": 4, "max_tokens": 8}'
    curl -N localhost:8000/v1/completions -H 'Content-Type: application/json' \\
        -d '{"prompt": "map 3 1 4 =>", "stream": true}'                       # server-sent events

    # on a cluster (GPU actors when the cluster has GPUs; sampler.engine=vllm on GPU nodes)
    ray job submit --working-dir . -- python -m ray_jobs.serve experiment=demo host=0.0.0.0 \\
        sampler.num_actors=4 sampler.engine=vllm

Settings are one typed config (`ServeConfig`), set like every job's: `--config FILE` and
dotted `field=value` overrides; `--help` lists them with their defaults.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import ray
from ray import serve

from common.config import ConfigError, load_config, secret_values
from common.logs import ray_runtime_env, setup_logging
from ray_jobs.checks import need_checkpoint
from ray_jobs.runner import config_error, config_parser, print_config
from search.pool import PoolConfig
from search.serve import ServeSettings, build_serve_app
from search.serve.guard import (
    API_KEY_ENV,
    API_KEY_FILE_ENV,
    api_key_from_environment,
    read_api_key_file,
)
from search.serve.limits import ServeLimits
from search.serve.protocol import ReasoningSplit
from training import pretrained

APP_NAME = "ratchet"
PROG = "ratchet serve"
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
    model_name: str = ""  # the id clients send as "model" (default: experiment or the dir's name)
    sampler: PoolConfig = field(default_factory=PoolConfig)  # engine, engine_kwargs, Ray actors (search/pool.py)
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


def settings_from(cfg: ServeConfig, env: dict[str, str] | None = None) -> ServeSettings:
    """The deployment's settings; the API key is read from the environment or a 0400 file."""
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
    checkpoint = pretrained.resolve_checkpoint(cfg.model) if cfg.model else None  # pretrained:<name> fetched once
    return ServeSettings(pool=pool, checkpoint=checkpoint, version=cfg.version or None,
                         model_name=cfg.model_name or None, api_key=api_key, limits=limits,
                         chat_max_tokens=cfg.chat_max_tokens,
                         reasoning=ReasoningSplit(cfg.thought_marker, cfg.response_marker)
                         if cfg.thought_marker else None)


def _api_key(cfg: ServeConfig, env) -> str | None:
    if cfg.api_key_file:
        return read_api_key_file(cfg.api_key_file)
    if cfg.api_key_env:
        if not env.get(cfg.api_key_env):
            raise ValueError(f"api_key_env={cfg.api_key_env}: that environment variable is empty or unset; "
                             "export it before starting serve")
        return env[cfg.api_key_env]
    return api_key_from_environment(env)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def run(settings: ServeSettings, *, host: str = "127.0.0.1", port: int = 8000, blocking: bool = True) -> str:
    """Start Serve on the current Ray cluster (ray.init if needed); returns the base URL."""

    if not ray.is_initialized():  # workers log like the jobs' (common.logs)
        ray.init(address=os.environ.get("RAY_ADDRESS"), runtime_env=ray_runtime_env())
    serve.start(http_options={"host": host, "port": port})
    url = f"http://{host}:{port}/v1"
    # the URL is what the user needs from this command: stdout, not a log line
    print(f"starting {settings.served_name} at {url}" + (" (Ctrl-C stops)" if blocking else ""), flush=True)
    # blocking=True: Serve's own wait loop, which shuts the app down on Ctrl-C.
    serve.run(build_serve_app(settings), name=APP_NAME, route_prefix="/", blocking=blocking)
    return url


def _old_flag(argv: list[str]) -> str | None:
    for arg in argv:
        flag = arg.split("=", 1)[0]
        if flag in OLD_FLAGS:
            return (f"{flag} is gone: write {OLD_FLAGS[flag]} (serve takes --config and field=value "
                    "overrides like every job; --help lists the fields)")
    return None


def parse(argv: list[str] | None = None) -> tuple[ServeSettings, str, int]:
    """(settings, host, port) from `--config FILE field=value ...`; exits 2 on a wrong config."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = config_parser(PROG, __doc__, ServeConfig)
    old = _old_flag(argv)
    if old:
        parser.exit(2, f"{PROG}: error: {old}\n")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, ServeConfig, args.overrides)
        if args.print_config:
            print_config(cfg)
            raise SystemExit(0)
        if cfg.model:
            need_checkpoint("model", cfg.model)
        settings = settings_from(cfg)
    except ConfigError as e:
        config_error(parser, e)
    if args.dry_run:
        print(f"{PROG}: config checked; nothing started (--dry-run)")
        raise SystemExit(0)
    return settings, cfg.host, cfg.port


def main(argv: list[str] | None = None) -> None:
    settings, host, port = parse(argv)
    setup_logging(secrets=secret_values(settings))  # the bearer token and engine keys never logged
    run(settings, host=host, port=port)


if __name__ == "__main__":
    main()
