"""The one job runner every ray_jobs entrypoint uses: CLI, config, run dir, Ray, status.

    def main(argv=None):
        runner.main(JOB, argv)                      # JOB = runner.JobSpec(...)

A job supplies only its config class and `run(cfg, ctx) -> summary`; the runner parses
`--config FILE field=value ...`, takes the experiment's lease (a second driver of the same
experiment refuses, naming the first), checks the run's identity (a rerun with another
resolved config refuses unless `--allow-config-change`, which is recorded), writes
`runs/<experiment>/config.yaml` and the experiment record (secrets redacted), starts (or
joins) Ray, and sets the status to running, then done, failed (with the error) or killed
(SIGTERM, Ctrl-C), whatever way the run ends. A thread renews the lease as the run's
heartbeat: after a SIGKILL it expires and the status reads "killed". Logging is
common.logs' (one format, driver and Ray workers alike; actor logs reach the driver and
`ray job logs`); every record passes a filter that blanks the config's secrets, while the
job itself gets the real values. The summary's headline goes into the experiment record
(`ratchet runs` lists it).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import ray

from common.config import (
    RedactingFilter,
    config_hash,
    dump_yaml,
    load_config,
    redact_secrets,
    secret_values,
    to_dict,
)
from common.logs import protect, ray_runtime_env, setup_logging
from store import Lease, Store

log = logging.getLogger(__name__)

C = TypeVar("C")


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
    """Join the cluster named by RAY_ADDRESS (as `ray job submit` sets it), or start a local one.

    Workers run common.logs' setup hook (format, redaction); their output is forwarded to
    this driver, whose output is the job's `ray job logs`."""
    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False, log_to_driver=True,
                 runtime_env=ray_runtime_env())


class Heartbeat:
    """Renews the lease every ttl/3 in a daemon thread; stops with the run."""

    def __init__(self, lease: Lease):
        self.lease, self.lost = lease, False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"lease-{lease.experiment}", daemon=True)

    def _beat(self) -> None:
        while not self._stop.wait(self.lease.ttl_s / 3):
            try:
                if not self.lease.renew():
                    self.lost = True
                    log.error("experiment %s: lease lost (another driver took over); archive writes now fail",
                              self.lease.experiment)
                    return
            except Exception as e:  # Redis away for a moment: retry at the next beat, within the TTL
                log.warning("experiment %s: lease renewal failed: %s", self.lease.experiment, e)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if not self.lost:
            self.lease.release()


def _still_ours(store: Store, lease: Lease) -> bool:
    holder = store.leases(lease.experiment).holder()
    return holder is None or holder.get("token") == lease.token


def redact_logs(cfg: Any) -> RedactingFilter:
    """Blank the config's secrets (and any URL password) in every record the root handlers write."""
    return protect(secret_values(cfg))


def execute(spec: JobSpec[C], cfg: C, store: Store | None = None, allow_config_change: bool = False,
            stop_on_sigterm: bool = False) -> dict[str, Any]:
    """Run one job under its experiment's lease, with its identity checked and its status kept
    right: running, then done, failed (with the error) or killed.

    `allow_config_change`: continue an experiment whose config differs (recorded). With
    `stop_on_sigterm` (the CLI's choice; a library caller keeps its own handlers), SIGTERM
    ends the run as "killed".
    """
    filt = redact_logs(cfg)
    store = store or Store.connect()
    lease = store.leases(cfg.experiment).acquire()  # LeaseHeld: another driver runs this experiment
    with Heartbeat(lease):
        store.experiments.create(cfg.experiment, spec.workload, to_dict(cfg), exist_ok=True,
                                 config_hash=config_hash(cfg), allow_change=allow_config_change)
        run_dir = Path(cfg.runs_dir) / cfg.experiment
        run_dir.mkdir(parents=True, exist_ok=True)
        dump_yaml(cfg, run_dir / "config.yaml")  # only once the identity check passed
        store.fence(lease)
        try:
            init_ray()
            if stop_on_sigterm and threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, _sigterm)  # after ray.init, which installs its own
            store.experiments.set_status(cfg.experiment, "running", host=socket.gethostname(), pid=os.getpid(),
                                         started=time.time())
            result = spec.run(cfg, JobContext(store=store, run_dir=run_dir))
            summary = asyncio.run(result) if inspect.isawaitable(result) else result
        except BaseException as e:
            status = "killed" if isinstance(e, KeyboardInterrupt | SystemExit) else "failed"
            if _still_ours(store, lease):  # else the record is the new driver's to write
                store.experiments.set_status(cfg.experiment, status, error=filt.redact(f"{type(e).__name__}: {e}"))
            raise
        line = _headline(spec, summary)
        if _still_ours(store, lease):  # a driver that lost its lease leaves the record to the new one
            store.experiments.set_result(cfg.experiment, _plain(summary, filt), headline=filt.redact(line))
            store.experiments.set_status(cfg.experiment, "done")
    if line:
        log.info("%s -> %s/report.md", line, run_dir)
    return summary


def _headline(spec: JobSpec[C], summary: dict[str, Any]) -> str:
    if spec.headline is None:
        return ""
    try:
        return spec.headline(summary)
    except Exception as e:  # a summary without the usual numbers (e.g. zero iterations): still done
        log.warning("no headline for this summary (%s: %s)", type(e).__name__, e)
        return ""


def _plain(summary: dict[str, Any], filt: RedactingFilter) -> dict[str, Any]:
    """The summary as JSON data for the record, with every secret the log filter knows blanked."""
    return json.loads(filt.redact(json.dumps(redact_secrets(summary), default=str)))


def _parser(spec: JobSpec[C]) -> argparse.ArgumentParser:
    module = spec.run.__module__
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=spec.doc.split("\n\n")[0])
    parser.add_argument("--config", default=None, help="YAML of overrides (see configs/)")
    if spec.iterations_flag:
        parser.add_argument("--iterations", type=int, default=None, help="shortcut for iterations=N")
    parser.add_argument("--allow-config-change", action="store_true",
                        help="continue an existing experiment with a changed config (recorded in its record)")
    parser.add_argument("overrides", nargs="*", help="field=value overrides, e.g. search.seed=1")
    return parser


def _config(spec: JobSpec[C], args: argparse.Namespace) -> C:
    overrides = list(args.overrides)
    if getattr(args, "iterations", None) is not None:
        overrides.append(f"iterations={args.iterations}")
    return load_config(args.config, spec.config_cls, overrides)


def parse(spec: JobSpec[C], argv: list[str] | None = None) -> C:
    """The resolved config from `--config FILE` and dotted `field=value` overrides."""
    return _config(spec, _parser(spec).parse_args(argv))


def _sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(f"stopped by signal {signal.Signals(signum).name}")


def main(spec: JobSpec[C], argv: list[str] | None = None) -> dict[str, Any]:
    setup_logging()
    args = _parser(spec).parse_args(argv)
    try:
        # `ray job stop` sends SIGTERM: the record then says "killed", not "running"
        return execute(spec, _config(spec, args), allow_config_change=args.allow_config_change,
                       stop_on_sigterm=True)
    except Exception:
        # through the redacting log handlers: Python's own printer would write the error (and
        # a secret in its message) to stderr, the `ray job logs` of the job, unfiltered
        log.exception("%s job failed", spec.workload)
        raise SystemExit(1) from None
