"""The one job runner every ray_jobs entrypoint uses: CLI, config, run dir, Ray, status.

    def main(argv=None):
        runner.main(JOB, argv)                      # JOB = runner.JobSpec(...)

A job supplies only its config class and `run(cfg, ctx) -> summary` (and optionally a
`check(cfg)` of what can be checked before anything starts: paths, task ids); the runner
parses `--config FILE field=value ...` (`--help` lists every field with its default and
comment, `--print-config` prints the resolved config, `--dry-run` checks it and stops; a
wrong config is one line on stderr and exit code 2, naming where the value was set), runs the
checks, refuses a multi-node cluster without a shared Redis or storage (jobs/cluster.py),
takes the experiment's lease (a second driver of the same experiment refuses, naming the
first), checks the run's identity before a local Ray starts (a rerun with another resolved
config refuses, in one line with the changed values, unless `--allow-config-change`, which is
recorded), starts (or joins) Ray, writes `runs/<experiment>/config.yaml` (and run.log, the full
log) and the experiment record (secrets redacted), and sets the status to running, then done,
failed (with the error) or killed (SIGTERM, Ctrl-C: exit code 143 or 130, no stack dump),
whatever way the run ends. A thread renews the lease as the run's
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
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, NoReturn, TypeVar

import ray
import yaml

from common.config import ConfigError, config_hash, dump_yaml, load_config, to_dict, with_origin
from common.faults import CannotContinue
from common.fieldhelp import describe_fields
from common.logs import add_run_log, protect, ray_runtime_env, remove_run_log, setup_logging
from common.placement import LEDGER, Demand, check_capacity
from common.redaction import RedactingFilter, redact_secrets, redact_text, redact_url, secret_values
from jobs.cluster import check_cluster
from jobs.stopping import Stopped, raise_on_stop_signals, restore
from store import Lease, Store
from store.connection import StoreUnavailable, configured_url
from store.server import running_local_server

log = logging.getLogger(__name__)

C = TypeVar("C")
# how a job's command is named in --help and errors: "python -m ray_jobs.soar" (ray job submit),
# or "ratchet soar" when ray_jobs.cli dispatched to it
COMMAND_PREFIX = "python -m ray_jobs."
RUN_LOG = "run.log"  # in the run dir: the driver's whole log, ratchet's DEBUG lines included


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
    # what can be checked before Redis, Ray or a seed build start (paths exist, task ids,
    # engine names); raises ConfigError naming the field
    check: Callable[[Any], None] | None = None
    # config field -> path every node reads (checkpoints, datasets): absolute on a multi-node cluster
    shared_paths: Callable[[Any], dict[str, str]] | None = None
    # (cfg, the cluster has GPUs) -> the actors and tasks it runs at once: refused up front when
    # the cluster cannot hold them (common/placement.py), instead of waiting forever in Ray
    demands: Callable[[Any, bool], list[Demand]] | None = None


def preflight(spec: JobSpec[C], cfg: C, start_ray: bool = True, sources: dict[str, str] | None = None) -> None:
    """The job's own checks, then the cluster's. Ray is joined (or started) here unless
    `start_ray` is False: then only a cluster named by RAY_ADDRESS is joined (a dry run starts
    nothing; a local Ray would be one node, which needs no cluster check). `sources` (where
    each value was set, from load_config) lets a failed check name the file or the command line."""
    check_job(spec, cfg, sources)
    if start_ray or _joins_cluster():
        check_on_cluster(spec, cfg)


def check_job(spec: JobSpec[C], cfg: C, sources: dict[str, str] | None = None) -> None:
    """The job's own checks (paths, task ids, engines); a failure names where its value was set."""
    if spec.check is None:
        return
    try:
        spec.check(cfg)
    except ConfigError as e:
        if sources is not None and e.args:
            e.args = (with_origin(str(e), spec.config_cls, sources), *e.args[1:])
        raise


def check_recorded_config(spec: JobSpec[C], cfg: C, allow_change: bool = False) -> str:
    """What a rerun would refuse (ConfigChanged: another workload's name, a changed config),
    asked of a store that is already up, without starting one; returns what was checked, or
    why it could not be (no local store running, the configured one unreachable)."""
    url = configured_url()
    if url is None:
        local = running_local_server()
        if local is None:
            return "the local store is not running: a config change is checked when the run starts"
        url = local.url
    try:
        store = Store.connect(url)
    except StoreUnavailable:  # the run itself says why, in one line, when it cannot reach it either
        return f"the store at {redact_url(url)} is not reachable: a config change is checked when the run starts"
    store.experiments.check_rerun(cfg.experiment, workload=spec.workload, config=to_dict(cfg),
                                  config_hash=config_hash(cfg), allow_change=allow_change)
    return "its recorded config matches" if cfg.experiment in store.experiments.names() else "a new experiment"


def _joins_cluster() -> bool:
    """Ray runs in this process already, or RAY_ADDRESS names a cluster (as `ray job submit` sets it)."""
    return ray.is_initialized() or bool(os.environ.get("RAY_ADDRESS"))


def check_on_cluster(spec: JobSpec[C], cfg: C) -> None:
    """Join (or start) Ray and refuse a cluster the run cannot work on: split state or paths
    other nodes cannot read (jobs/cluster.py), or more than it can hold (common/placement.py)."""
    init_ray()
    nodes = ray.nodes()
    check_cluster(nodes, os.environ, spec.shared_paths(cfg) if spec.shared_paths else {})
    if spec.demands is not None:
        check_capacity(nodes, spec.demands(cfg, ray.cluster_resources().get("GPU", 0) >= 1))


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
            stop_on_sigterm: bool = False, sources: dict[str, str] | None = None) -> dict[str, Any]:
    """Run one job under its experiment's lease, with its identity checked and its status kept
    right: running, then done, failed (with the error) or killed.

    `allow_config_change`: continue an experiment whose config differs (recorded). With
    `stop_on_sigterm` (the CLI's choice; a library caller keeps its own handlers), SIGTERM and
    SIGINT end the run as "killed" by raising `Stopped` (jobs/stopping.py). `sources`: as
    for preflight.
    """
    filt = redact_logs(cfg)
    check_job(spec, cfg, sources)
    joined = _joins_cluster()
    if joined:  # before the store: a cluster without a shared Redis must not start one
        check_on_cluster(spec, cfg)
    store = store or Store.connect()
    lease = store.leases(cfg.experiment).acquire()  # LeaseHeld: another driver runs this experiment
    with Heartbeat(lease):
        identity = dict(workload=spec.workload, config=to_dict(cfg), config_hash=config_hash(cfg),
                        allow_change=allow_config_change)
        # ConfigChanged before a local Ray starts: a changed config costs a second, not Ray's start
        store.experiments.check_rerun(cfg.experiment, **identity)
        if not joined:
            check_on_cluster(spec, cfg)  # a local Ray is one node: nothing to split
        store.experiments.create(cfg.experiment, exist_ok=True, **identity)
        run_dir = Path(cfg.runs_dir) / cfg.experiment
        run_dir.mkdir(parents=True, exist_ok=True)
        dump_yaml(cfg, run_dir / "config.yaml")  # only once the identity check passed
        store.fence(lease)
        # after ray.init, which installs its own SIGTERM handler (a stack dump)
        handlers = raise_on_stop_signals() if stop_on_sigterm else None
        run_log = add_run_log(run_dir / RUN_LOG)  # the full detail; the console shows a line per step
        try:
            try:
                store.experiments.set_status(cfg.experiment, "running", host=socket.gethostname(), pid=os.getpid(),
                                             started=time.time())
                LEDGER.clear()  # this run's counts only (common/placement.py)
                result = spec.run(cfg, JobContext(store=store, run_dir=run_dir))
                summary = asyncio.run(result) if inspect.isawaitable(result) else result
                record_nodes(summary, run_dir)
            except BaseException as e:
                stopped = isinstance(e, KeyboardInterrupt | SystemExit | Stopped)
                if not isinstance(e, Stopped):  # after a stop, later signals stay ignored until the exit
                    restore(handlers)
                log.debug("%s run ended by %s", spec.workload, type(e).__name__, exc_info=not stopped)  # run.log
                if _still_ours(store, lease):  # else the record is the new driver's to write
                    store.experiments.set_status(cfg.experiment, "killed" if stopped else "failed",
                                                 error=filt.redact(f"{type(e).__name__}: {e}"))
                raise
            restore(handlers)  # ended by itself: an in-process caller gets its handlers back
            line = _headline(spec, summary)
            if _still_ours(store, lease):  # a driver that lost its lease leaves the record to the new one
                store.experiments.set_result(cfg.experiment, _plain(summary, filt), headline=filt.redact(line))
                store.experiments.set_status(cfg.experiment, "done")
            if line:
                log.info("%s -> %s/report.md", line, run_dir)
        finally:
            remove_run_log(run_log)
    return summary


def record_nodes(summary: dict[str, Any], run_dir: Path) -> None:
    """Add `nodes` (which Ray node served how many requests and items, per role) to the
    summary and to the summary.json the job wrote: on a cluster, where the work went."""
    if not LEDGER.served or not isinstance(summary, dict):
        return
    summary["nodes"] = LEDGER.report(ray.nodes() if ray.is_initialized() else [])
    path = run_dir / "summary.json"
    if path.exists():
        written = json.loads(path.read_text())
        written["nodes"] = summary["nodes"]
        path.write_text(json.dumps(written, indent=2))


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


class CommandParser(argparse.ArgumentParser):
    """argparse whose usage errors ("unrecognized arguments: --sampler.api_key=sk-...") echo
    the command line with its secrets as ***: the console of a `ray job submit` is its log."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {redact_text(message)}\n")


def config_parser(prog: str, doc: str, config_cls: type, iterations_flag: bool = False) -> argparse.ArgumentParser:
    """The CLI every command shares: `--config FILE`, dotted `field=value` overrides,
    `--print-config`, `--dry-run`, and a `--help` that lists every config field."""
    parser = CommandParser(
        prog=prog, description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="config fields (set them as field=value arguments or in the --config YAML):\n"
               + describe_fields(config_cls))
    parser.add_argument("--config", default=None, help="YAML of overrides (see configs/)")
    if iterations_flag:
        parser.add_argument("--iterations", type=int, default=None, help="shortcut for iterations=N")
    parser.add_argument("--print-config", action="store_true",
                        help="print the resolved config (secrets as ***) and exit")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the config (fields, paths, task ids, the cluster) and exit 0; starts nothing")
    parser.add_argument("overrides", nargs="*", metavar="field=value", help="overrides, e.g. search.seed=1")
    return parser


def _parser(spec: JobSpec[C]) -> argparse.ArgumentParser:
    # the module's name, not run.__module__: run as `python -m ray_jobs.soar` that is "__main__"
    name = spec.workload.replace("-", "_")
    prog = f"ratchet {spec.workload}" if COMMAND_PREFIX == "ratchet" else f"{COMMAND_PREFIX}{name}"
    parser = config_parser(prog, spec.doc, spec.config_cls, spec.iterations_flag)
    parser.add_argument("--allow-config-change", action="store_true",
                        help="continue an existing experiment with a changed config: its archive and models "
                             "carry on, and the change is recorded in its record")
    return parser


def print_config(cfg: Any) -> None:
    """The resolved config as YAML on stdout, secrets as ***."""
    sys.stdout.write(yaml.safe_dump(redact_secrets(to_dict(cfg)), sort_keys=False))


def config_error(parser: argparse.ArgumentParser, error: ConfigError) -> None:
    """Exit as argparse does on a usage error: one line on stderr, exit code 2, no traceback."""
    parser.exit(2, f"{parser.prog}: error: {redact_secrets(str(error))}\n")


def _config(spec: JobSpec[C], args: argparse.Namespace, sources: dict[str, str] | None = None) -> C:
    overrides = list(args.overrides)
    if getattr(args, "iterations", None) is not None:
        overrides.append(f"iterations={args.iterations}")
    return load_config(args.config, spec.config_cls, overrides, sources)


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> argparse.Namespace:
    """Options and `field=value` overrides in any order (`--iterations 3 search.batch=4`): plain
    parse_args takes the overrides only before the first option."""
    return parser.parse_intermixed_args(argv)


def parse(spec: JobSpec[C], argv: list[str] | None = None) -> C:
    """The resolved config from `--config FILE` and dotted `field=value` overrides."""
    return _config(spec, parse_args(_parser(spec), argv))


def main(spec: JobSpec[C], argv: list[str] | None = None) -> dict[str, Any]:
    setup_logging()
    parser = _parser(spec)
    args = parse_args(parser, argv)
    sources: dict[str, str] = {}  # dotted field -> where it was set: a failed check names it
    try:
        cfg = _config(spec, args, sources)
        if args.print_config:
            print_config(cfg)
            return {}
        if args.dry_run:
            preflight(spec, cfg, start_ray=False, sources=sources)
            recorded = check_recorded_config(spec, cfg, allow_change=args.allow_config_change)
            print(f"{parser.prog}: config of experiment {cfg.experiment!r} checked ({recorded}); "
                  "nothing started (--dry-run)")
            return {}
        # `ray job stop` sends SIGTERM: the record then says "killed", not "running"
        return execute(spec, cfg, allow_config_change=args.allow_config_change, stop_on_sigterm=True,
                       sources=sources)
    except ConfigError as e:  # the user's mistake (a changed config on a rerun too): one line, exit code 2
        config_error(parser, e)
    except (Stopped, KeyboardInterrupt) as e:  # KeyboardInterrupt: Ctrl-C before the handlers were set
        stop = e if isinstance(e, Stopped) else Stopped(signal.SIGINT)
        log.warning("%s stopped by %s; its status is 'killed'; the same command resumes it", spec.workload,
                    stop.name)
        if ray.is_initialized():
            ray.shutdown()
        raise SystemExit(stop.exit_code) from None
    except CannotContinue as e:  # the work's own dead end (no usable verdicts, ...): what to fix, one line
        log.error("%s job failed: %s", spec.workload, e)
        raise SystemExit(1) from None
    except Exception:
        # through the redacting log handlers: Python's own printer would write the error (and
        # a secret in its message) to stderr, the `ray job logs` of the job, unfiltered
        log.exception("%s job failed", spec.workload)
        raise SystemExit(1) from None
