"""One log setup for every process of a job: the driver, the CLIs and Ray's worker processes.

    from common.logs import setup_logging, protect
    setup_logging()                         # a CLI's first line: one format, to stderr
    protect(secret_values(cfg))             # a job or actor that holds secrets: never logged

Every handler on the root logger carries the process's one RedactingFilter, which blanks
URL passwords, the values of secret-named environment variables (OPENAI_API_KEY, ...) and
whatever secrets `protect()` was given. Ray workers run `setup_worker` (named in the job's
runtime_env as its worker_process_setup_hook), so an actor's log lines have the same format
and the same redaction before Ray forwards them to the driver and `ray job logs`.
Log lines go through tqdm.write, so they print above progress bars, not through them.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from tqdm import tqdm

from common.redaction import RedactingFilter, is_secret_key

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
DATE_FORMAT = "%H:%M:%S"
ENV_LEVEL = "RATCHET_LOG_LEVEL"  # DEBUG, INFO (default), WARNING, ...
WORKER_SETUP_HOOK = "common.logs.setup_worker"  # runtime_env["worker_process_setup_hook"]
# ratchet's own top-level packages: their DEBUG lines go to a run's run.log (add_run_log)
RATCHET_PACKAGES = ("common", "store", "verifiers", "training", "search", "evolution", "scaling", "thinking", "jobs", "ray_jobs",
                    "ratchet")  # ratchet.progress

_FILTER = RedactingFilter()  # the process's one filter: secrets only ever get added to it


class ConsoleHandler(logging.StreamHandler):
    """stderr through tqdm.write: a log line clears the progress bars, prints, redraws them.

    The stream is looked up at each write (as logging.lastResort does), so a handler made
    before sys.stderr was replaced (pytest's capture, Ray's redirection) writes to the new one.
    """

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter(LOG_FORMAT, DATE_FORMAT))

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.__init__ sets it; stderr is always used
        pass

    def emit(self, record: logging.LogRecord) -> None:
        try:
            tqdm.write(self.format(record), file=self.stream)
            self.flush()
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)


def env_secrets(environ: dict[str, str] | None = None) -> set[str]:
    """Values of secret-named environment variables (OPENAI_API_KEY, HF_TOKEN, ...)."""
    env = os.environ if environ is None else environ
    return {v for k, v in env.items() if is_secret_key(k) and v}


def protect(secrets: Iterable[str] = ()) -> RedactingFilter:
    """Add secrets to the process's filter and make sure every root handler carries it.

    Call again after adding a handler: handlers added later are covered from that call on.
    """
    _FILTER.add(secrets)
    for handler in logging.getLogger().handlers:
        for old in [f for f in handler.filters if isinstance(f, RedactingFilter) and f is not _FILTER]:
            handler.removeFilter(old)  # a filter of an older setup: ours has all its secrets and more
        if _FILTER not in handler.filters:
            handler.addFilter(_FILTER)
    return _FILTER


def setup_logging(level: str | int | None = None, secrets: Iterable[str] = ()) -> RedactingFilter:
    """Root logger: one console handler (stderr, LOG_FORMAT), level from `level` or
    $RATCHET_LOG_LEVEL (INFO), the redacting filter on every handler. Idempotent."""
    root = logging.getLogger()
    if not any(isinstance(h, ConsoleHandler) for h in root.handlers):
        root.addHandler(ConsoleHandler())
    root.setLevel(level or os.environ.get(ENV_LEVEL, "INFO").upper())
    for handler in root.handlers:  # the console keeps this level when a run log takes ratchet's DEBUG lines
        if isinstance(handler, ConsoleHandler):
            handler.setLevel(root.level)
    # one line per HTTP request (the openai SDK's httpx or httpx2) or lock: shown only at DEBUG
    for noisy in ("httpx", "httpx2", "urllib3", "filelock"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if root.level <= logging.DEBUG else logging.WARNING)
    logging.captureWarnings(True)  # a library's FutureWarning as a log line, not a raw stderr write
    quiet_library_bars()
    return protect([*env_secrets(), *secrets])


def add_run_log(path: Path) -> logging.Handler:
    """Write this process's log to `path` (a run dir's run.log) as well: ratchet's own DEBUG
    lines included (the per-seed and per-batch detail the console leaves out), dates in full,
    secrets redacted. The console keeps its level. Undo with `remove_run_log`."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.DEBUG)
    logging.getLogger().addHandler(handler)
    for package in RATCHET_PACKAGES:
        logging.getLogger(package).setLevel(logging.DEBUG)
    protect()  # the redacting filter on the new handler too
    return handler


def remove_run_log(handler: logging.Handler) -> None:
    logging.getLogger().removeHandler(handler)
    handler.close()
    for package in RATCHET_PACKAGES:
        logging.getLogger(package).setLevel(logging.NOTSET)


def quiet_library_bars() -> None:
    """Without bars (not a terminal: a Ray worker, `ray job logs`), Hugging Face's own bars
    (loading weights, mapping datasets) would write \r-joined lines into the log: off."""
    from common.progress import mode

    if mode() == "bars":
        return
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers and the hub read it
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    for module, off in (("datasets", "disable_progress_bars"), ("transformers.utils.logging", "disable_progress_bar"),
                        ("huggingface_hub.utils", "disable_progress_bars")):
        if module in sys.modules:  # imported before this setup: its switch, not the variable, decides
            getattr(sys.modules[module], off)()


def setup_worker() -> None:
    """Ray's worker_process_setup_hook: the driver's format and redaction in every worker."""
    setup_logging()


def ray_runtime_env(env_vars: dict[str, str] | None = None) -> dict:
    """The runtime_env a job's ray.init passes: workers set up their logging like the driver's.
    (Secrets never go into env_vars: a runtime_env is part of Ray's cluster state.)"""
    return {"worker_process_setup_hook": WORKER_SETUP_HOOK} | ({"env_vars": env_vars} if env_vars else {})
