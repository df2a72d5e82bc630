"""`ratchet serve`: an OpenAI-compatible endpoint (Ray Serve + SamplerPool) for a checkpoint.

    # local: a checkpoint dir, or a registry version of an experiment
    ratchet serve model=models/scaling-arith-seed port=8000
    ratchet serve experiment=tpo-demo thought_marker=Work: response_marker=So:  # -> reasoning_content
    RATCHET_API_KEY=$(openssl rand -hex 32) ratchet serve experiment=demo version=v2   # bearer token
    RATCHET_API_KEY_FILE=/run/secrets/ratchet ratchet serve model=PATH host=0.0.0.0    # a 0400 file
    ratchet serve model=PATH limits='{max_n: 16, max_body_bytes: 65536}'              # request caps
    ratchet serve --config my-serve.yaml sampler.num_actors=2      # the jobs' CLI: YAML + overrides
    # search requests' verdicts from a trained verifier beside the model (an adapter merged once)
    ratchet serve model=pretrained:smollm2-135m-instruct verifier=models/smollm2-verifier-lora
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

import sys

from common.config import ConfigError, load_config
from common.logs import setup_logging
from common.redaction import secret_values
from jobs.runner import config_error, config_parser, parse_args, print_config
from jobs.serving import run
from search.engines.checks import check_engine
from search.serve import ServeSettings
from search.serve.config import ServeConfig, old_flag, settings_from
from training import adapters, pretrained
from training.checks import need_checkpoint

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
        if cfg.verifier:  # a checkpoint or an adapter dir
            need_checkpoint("verifier", cfg.verifier)
        check_engine("sampler", cfg.sampler, job="serve")
        if cfg.model and not args.dry_run:  # pretrained:<name>: fetched and converted once, then its dir
            checkpoint = pretrained.resolve_checkpoint(cfg.model)
        verifier = None
        if cfg.verifier and cfg.verifier != cfg.model and not args.dry_run:  # an adapter: merged once
            verifier = adapters.checkpoint_of(cfg.verifier)
        settings = settings_from(cfg, checkpoint=checkpoint, verifier=verifier)
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
