"""`ratchet serve`'s server on Ray (ray_jobs/serve.py parses its config): Serve started with the
app, then served until SIGTERM or SIGINT, then a clean stop.

    url = run(settings, host="127.0.0.1", port=8000, blocking=False)   # tests, benchmarks: returns at once
    shutdown(own_ray=True)
"""

from __future__ import annotations

import contextlib
import logging
import os

import ray
from ray import serve

from common.logs import ray_runtime_env
from jobs.stopping import Stopped, raise_on_stop_signals, wait_for_stop_signal
from search.serve import ServeSettings, build_serve_app

log = logging.getLogger(__name__)
APP_NAME = "ratchet"


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
