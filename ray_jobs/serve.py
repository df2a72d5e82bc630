"""`ratchet serve`: an OpenAI-compatible endpoint (Ray Serve + SamplerPool) for a checkpoint.

    # local: a checkpoint dir, or a registry version of an experiment
    ratchet serve --model ~/.ratchet/models/seed-tiny-<hash> --port 8000
    ratchet serve --experiment tpo-demo --reasoning 'Work:' 'So:'   # thought -> reasoning_content
    RATCHET_API_KEY=sekret ratchet serve --experiment demo --version v2 --api-key-env RATCHET_API_KEY
    curl localhost:8000/v1/completions -H 'Content-Type: application/json' \
        -d '{"prompt": "map 3 1 4 =>", "n": 4, "max_tokens": 8}'

    # on a cluster (GPU actors when the cluster has GPUs; --engine vllm on GPU nodes)
    ray job submit --working-dir . -- python -m ray_jobs.serve --experiment demo --actors 4 --engine vllm
"""

from __future__ import annotations

import argparse
import json
import os

import ray
from ray import serve

from common.config import secret_values
from common.logs import ray_runtime_env, setup_logging
from search.engines import ENGINES
from search.pool import PoolConfig
from search.serve import ServeSettings, build_serve_app
from search.serve.protocol import ReasoningSplit

APP_NAME = "ratchet"


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


def parse(argv: list[str] | None = None) -> tuple[ServeSettings, str, int]:
    parser = argparse.ArgumentParser(prog="ratchet serve", description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="a Hugging Face checkpoint directory")
    source.add_argument("--experiment", help="serve a model registry version of this experiment")
    parser.add_argument("--version", help="registry version (default: the experiment's current one)")
    parser.add_argument("--model-name", help="id clients send as 'model' (default: experiment or dir name)")
    parser.add_argument("--engine", default="transformers", choices=sorted(ENGINES))
    parser.add_argument("--engine-kwargs", default="{}", help="JSON object of engine arguments")
    parser.add_argument("--actors", type=int, default=1, help="sampler actors (one GPU each when GPUs exist)")
    parser.add_argument("--cpus-per-actor", type=float, default=1.0)
    parser.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to accept other machines")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--reasoning", nargs=2, metavar=("THOUGHT_MARKER", "RESPONSE_MARKER"),
                        help="a thinking model: chat answers carry the thought in reasoning_content "
                             "and the response in content (e.g. --reasoning 'Work:' 'So:')")
    parser.add_argument("--api-key-env", help="environment variable holding the bearer token to require")
    args = parser.parse_args(argv)
    if args.version and not args.experiment:
        parser.error("--version needs --experiment")
    try:
        engine_kwargs = json.loads(args.engine_kwargs)
    except ValueError as e:
        parser.error(f"--engine-kwargs is not JSON: {e}")
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            parser.error(f"--api-key-env {args.api_key_env}: that environment variable is empty or unset")
    pool = PoolConfig(engine=args.engine, engine_kwargs=engine_kwargs, num_actors=args.actors,
                      num_cpus_per_actor=args.cpus_per_actor, experiment=args.experiment)
    settings = ServeSettings(pool=pool, checkpoint=args.model, version=args.version,
                             model_name=args.model_name, api_key=api_key,
                             reasoning=ReasoningSplit(*args.reasoning) if args.reasoning else None)
    return settings, args.host, args.port


def main(argv: list[str] | None = None) -> None:
    settings, host, port = parse(argv)
    setup_logging(secrets=secret_values(settings))  # the bearer token and engine keys never logged
    run(settings, host=host, port=port)


if __name__ == "__main__":
    main()
