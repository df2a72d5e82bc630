"""`ratchet serve`: an OpenAI-compatible endpoint (Ray Serve + SamplerPool) for a checkpoint.

    # local: a checkpoint dir, or a registry version of an experiment
    ratchet serve model=models/scaling-arith-seed port=8000
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

Settings are one typed config (`ServeConfig`, search/serve/config.py), set like every job's:
`--config FILE` and dotted `field=value` overrides; `--help` lists them with their defaults.
SIGTERM or Ctrl-C stops it cleanly (Serve and Ray shut down) with exit code 0.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys

import ray
from ray import serve

from common.config import ConfigError, load_config
from common.logs import ray_runtime_env, setup_logging
from common.redaction import secret_values
from ray_jobs.checks import check_engine, need_checkpoint
from ray_jobs.runner import config_error, config_parser, parse_args, print_config
from ray_jobs.stopping import Stopped, raise_on_stop_signals, wait_for_stop_signal
from search.serve import ServeSettings, build_serve_app
from search.serve.config import ServeConfig, old_flag, settings_from
from training import pretrained

log = logging.getLogger(__name__)
APP_NAME = "ratchet"
PROG = "ratchet serve"


def parse(argv: list[str] | None = None) -> tuple[ServeSettings, str, int]:
    """(settings, host, port) from `--config FILE field=value ...`; exits 2 on a wrong config."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = config_parser(PROG, __doc__, ServeConfig)
    old = old_flag(argv)
    if old:
        parser.exit(2, f"{PROG}: error: {old}\n")
    args = parse_args(parser, argv)  # overrides before or after the options
    try:
        cfg = load_config(args.config, ServeConfig, args.overrides)
        if args.print_config:
            print_config(cfg)
            raise SystemExit(0)
        checkpoint = None
        if cfg.model:
            need_checkpoint("model", cfg.model)
        check_engine("sampler", cfg.sampler, job="serve")
        if cfg.model and not args.dry_run:  # pretrained:<name>: fetched and converted once, then its dir
            checkpoint = pretrained.resolve_checkpoint(cfg.model)
        settings = settings_from(cfg, checkpoint=checkpoint)
    except ConfigError as e:
        config_error(parser, e)
    if args.dry_run:
        print(f"{PROG}: config checked; nothing started (--dry-run)")
        raise SystemExit(0)
    return settings, cfg.host, cfg.port


def run(settings: ServeSettings, *, host: str = "127.0.0.1", port: int = 8000, blocking: bool = True) -> str:
    """Start Serve on the current Ray cluster (ray.init if needed); returns the base URL.

    With `blocking`, serves until SIGTERM or SIGINT (from start-up on), then deletes the app and
    shuts Serve and this driver's Ray down: a clean stop, no stack dump."""
    own_ray = not ray.is_initialized() and not os.environ.get("RAY_ADDRESS")  # a local Ray this call starts
    if not ray.is_initialized():  # workers log like the jobs' (common.logs)
        ray.init(address=os.environ.get("RAY_ADDRESS"), runtime_env=ray_runtime_env())
    if blocking:
        raise_on_stop_signals()  # after ray.init, whose own SIGTERM handler dumps the stack
    url = f"http://{host}:{port}/v1"
    try:
        serve.start(http_options={"host": host, "port": port})
        serve.run(build_serve_app(settings), name=APP_NAME, route_prefix="/", blocking=False)
        # the URL is what the user needs from this command: stdout, not a log line
        also = f" (also named {', '.join(settings.aliases)})" if settings.aliases else ""
        print(f"serving {settings.served_name}{also} at {url}" + (" (Ctrl-C or SIGTERM stops)" if blocking else ""),
              flush=True)
        if blocking:
            wait_for_stop_signal()
    except Stopped as stop:
        log.info("stopping (%s): shutting down Serve and Ray", stop.name)
        shutdown(own_ray=own_ray)
        log.info("stopped")
    return url


def shutdown(own_ray: bool = False) -> None:
    """Delete the app, stop Serve, leave Ray; each step tried even when one before it failed.

    On a Ray this process started, ray.shutdown ends Serve's controller with the rest: its own
    serve.shutdown kills the controller mid-`graceful_shutdown`, and the raylet then prints
    "Task ServeController.graceful_shutdown failed ... will be retried" on a clean stop."""
    steps = [lambda: serve.delete(APP_NAME), *([] if own_ray else [serve.shutdown]), ray.shutdown]
    for step in steps:
        with contextlib.suppress(Exception):
            step()


def main(argv: list[str] | None = None) -> None:
    settings, host, port = parse(argv)
    setup_logging(secrets=secret_values(settings))  # the bearer token and engine keys never logged
    run(settings, host=host, port=port)


if __name__ == "__main__":
    main()
