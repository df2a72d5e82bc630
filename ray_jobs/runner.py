"""The one job runner every ray_jobs entrypoint uses: CLI, config, run dir, Ray, status.

    def main(argv=None):
        runner.main(JOB, argv)                      # JOB = runner.JobSpec(...)

A job supplies only its config class and `run(cfg, ctx) -> summary`; the runner parses
`--config FILE field=value ...`, writes `runs/<experiment>/config.yaml`, registers the
experiment in the store, starts (or joins) Ray, and sets the status to running, then done
or failed (with the error), whatever way the run ends.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import ray

from common.config import dump_yaml, load_config, to_dict
from store import Store

C = TypeVar("C")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


@dataclass
class JobContext:
    """What the runner hands a job's run function."""

    store: Store
    run_dir: Path


RunFn = Callable[[Any, JobContext], "dict[str, Any] | Awaitable[dict[str, Any]]"]


@dataclass(frozen=True)
class JobSpec(Generic[C]):
    workload: str  # the experiment record's workload name: soar | scaling | tpo | ...
    config_cls: type[C]  # a dataclass with `experiment` and `runs_dir` fields
    run: RunFn  # run(cfg, ctx) -> summary dict (sync or async)
    doc: str  # the job module's docstring: its first paragraph is the --help description
    headline: Callable[[dict[str, Any]], str] | None = None  # the final line, from the summary
    iterations_flag: bool = False  # add --iterations N as a shortcut for iterations=N


def init_ray() -> None:
    """Join the cluster named by RAY_ADDRESS (as `ray job submit` sets it), or start a local one."""
    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False, log_to_driver=False)


def execute(spec: JobSpec[C], cfg: C, store: Store | None = None) -> dict[str, Any]:
    """Run one job with its status kept right: running, then done or failed (with the error)."""
    run_dir = Path(cfg.runs_dir) / cfg.experiment
    run_dir.mkdir(parents=True, exist_ok=True)
    dump_yaml(cfg, run_dir / "config.yaml")
    store = store or Store.connect()
    store.experiments.create(cfg.experiment, spec.workload, to_dict(cfg), exist_ok=True)
    store.experiments.set_status(cfg.experiment, "running")
    try:
        init_ray()
        result = spec.run(cfg, JobContext(store=store, run_dir=run_dir))
        summary = asyncio.run(result) if inspect.isawaitable(result) else result
    except BaseException as e:
        store.experiments.set_status(cfg.experiment, "failed", error=f"{type(e).__name__}: {e}")
        raise
    store.experiments.set_status(cfg.experiment, "done")
    if spec.headline is not None:
        print(f"{spec.headline(summary)} -> {run_dir}/report.md", flush=True)
    return summary


def parse(spec: JobSpec[C], argv: list[str] | None = None) -> C:
    """The resolved config from `--config FILE` and dotted `field=value` overrides."""
    module = spec.run.__module__
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=spec.doc.split("\n\n")[0])
    parser.add_argument("--config", default=None, help="YAML of overrides (see configs/)")
    if spec.iterations_flag:
        parser.add_argument("--iterations", type=int, default=None, help="shortcut for iterations=N")
    parser.add_argument("overrides", nargs="*", help="field=value overrides, e.g. search.seed=1")
    args = parser.parse_args(argv)
    overrides = list(args.overrides)
    if getattr(args, "iterations", None) is not None:
        overrides.append(f"iterations={args.iterations}")
    return load_config(args.config, spec.config_cls, overrides)


def main(spec: JobSpec[C], argv: list[str] | None = None) -> dict[str, Any]:
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, datefmt="%H:%M:%S")
    return execute(spec, parse(spec, argv))
