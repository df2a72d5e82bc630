"""One log format and one redaction for every process of a job: the driver, its CLIs, and
Ray's actors (set up by the runtime_env's worker_process_setup_hook, forwarded to the driver)."""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path

import pytest
import ray

from common import logs, progress
from common.redaction import secret_values

SECRET = "sk-live-logs-0123456789"
URL = "redis://:pw-in-a-url-4242@queue.internal:6380/0"
LINE = re.compile(r"^\d\d:\d\d:\d\d INFO ratchet\.test: ", re.M)  # LOG_FORMAT with DATE_FORMAT


def test_a_cli_logs_one_format_to_stderr_with_secrets_blanked(capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment-77")
    logs.setup_logging(secrets=[SECRET])
    logging.getLogger("ratchet.test").info("key %s env %s url %s", SECRET, "sk-from-the-environment-77", URL)
    err = capsys.readouterr().err
    assert LINE.search(err), err
    assert SECRET not in err and "sk-from-the-environment-77" not in err and "pw-in-a-url-4242" not in err
    assert "key *** env *** url redis://:***@queue.internal" in err


def test_setup_is_idempotent_and_covers_handlers_added_before_it():
    root = logging.getLogger()
    early = logging.StreamHandler()
    root.addHandler(early)
    try:
        logs.setup_logging()
        logs.setup_logging()
        assert sum(isinstance(h, logs.ConsoleHandler) for h in root.handlers) == 1
        assert all(any(f is logs._FILTER for f in h.filters) for h in root.handlers)
    finally:
        root.removeHandler(early)


def test_http_request_lines_show_only_at_debug():
    """The openai SDK's client (httpx2 in its newer releases) logged every request at INFO: a TPO
    job with a served judge printed one line per verdict batch."""
    root = logging.getLogger()
    before = root.level
    try:
        logs.setup_logging("INFO")
        assert not any(logging.getLogger(n).isEnabledFor(logging.INFO) for n in ("httpx", "httpx2"))
        logs.setup_logging("DEBUG")
        assert all(logging.getLogger(n).isEnabledFor(logging.DEBUG) for n in ("httpx", "httpx2"))
    finally:
        logs.setup_logging(logging.getLevelName(before))


def test_a_sampler_actor_blanks_its_engines_api_key_in_its_own_logs(capsys):
    """SamplerWorker runs inside the actor: its engine's key joins that process's filter."""
    from search.pool import SamplerWorker

    logs.setup_logging()
    SamplerWorker("openai", {"base_url": "http://127.0.0.1:9/v1", "api_key": "sk-engine-key-31337"},
                  checkpoint=None, version=None)
    logging.getLogger("ratchet.test").info("engine kwargs {'api_key': 'sk-engine-key-31337'}")
    err = capsys.readouterr().err
    assert "engine kwargs" in err and "sk-engine-key-31337" not in err


@ray.remote
class Talker:
    """An actor holding a secret in its config, as SamplerWorker does with an engine's key."""

    def __init__(self, config: dict):
        logs.protect(secret_values(config))

    def say(self, marker: str) -> int:
        logging.getLogger("ratchet.test").info("%s key %s url %s", marker, SECRET, URL)
        return os.getpid()


def _worker_err(pid: int) -> str:
    logs_dir = Path(ray._private.worker._global_node.get_logs_dir_path())
    return "".join(p.read_text() for p in logs_dir.glob(f"worker-*-{pid}.err"))


def test_an_actors_log_lines_reach_the_driver_formatted_and_without_secrets(ray_local, capsys):
    marker = f"actor-marker-{time.time_ns()}"
    pid = ray.get(Talker.remote({"engine_kwargs": {"api_key": SECRET}}).say.remote(marker))
    written = _worker_err(pid)  # the actor's own stderr file, which Ray's log monitor forwards
    assert marker in written
    assert LINE.search(written), written  # the hook set the driver's format inside the worker
    assert SECRET not in written and "pw-in-a-url-4242" not in written
    seen, deadline = "", time.monotonic() + 60
    while marker not in seen:  # forwarded by Ray's log monitor: poll for it, no fixed sleep
        if time.monotonic() > deadline:
            raise AssertionError(f"the actor's line never reached the driver; got {seen[-2000:]!r}")
        captured = capsys.readouterr()
        seen += captured.out + captured.err
        time.sleep(0.1)
    line = next(x for x in seen.splitlines() if marker in x)
    assert f"pid={pid})" in line and "key *** url redis://:***@queue.internal" in line
    assert SECRET not in seen


def test_progress_is_log_lines_without_a_terminal_and_bars_when_asked(caplog, monkeypatch, capsys):
    monkeypatch.setenv(progress.ENV_INTERVAL, "0")
    with caplog.at_level(logging.DEBUG, logger="ratchet.progress"):
        with progress.progress(total=3, desc="[test] phase", unit="q") as bar:  # pytest's stderr: no TTY
            with progress.progress(total=1, desc="[test] nested") as inner:  # tqdm moves the cursor for it
                inner.update(1)
            bar.update(1)
            bar.update(2)
    records = [r for r in caplog.records if r.name == "ratchet.progress"]
    lines = [r.getMessage() for r in records]
    assert lines[0].startswith("[test] phase: 0/3") and lines[-1].startswith("[test] phase: 3/3 (100%)")
    # a phase's first and last lines are detail (run.log); the lines while it runs are its heartbeat
    levels = {r.getMessage().split(" (")[0]: r.levelname for r in records}
    assert (levels["[test] phase: 0/3"], levels["[test] phase: 1/3"], levels["[test] phase: 3/3"]) == (
        "DEBUG", "INFO", "DEBUG")
    assert not any(re.search(r"\d\.\d\d\S*/s", x) for x in lines), lines  # tqdm's rates, rounded
    assert "[test] nested: 1/1 (100%)" in "\n".join(lines)
    assert all("\r" not in x and "\x1b" not in x and x.startswith("[test] ") for x in lines), lines
    monkeypatch.setenv(progress.ENV_MODE, "bars")
    with progress.progress(total=2, desc="[test] bar") as bar:
        bar.update(2)
    assert "[test] bar: 100%" in capsys.readouterr().err
    monkeypatch.setenv(progress.ENV_MODE, "loud")
    with pytest.raises(ValueError, match="RATCHET_PROGRESS='loud' is not one of"):
        progress.progress(total=1)


def test_without_a_terminal_library_bars_are_off_and_warnings_are_log_lines(capsys):
    """Hugging Face's own bars would write \\r-joined lines into `ray job logs`."""
    import warnings

    import datasets
    from transformers.utils import logging as hf_logging

    logging.captureWarnings(False)  # pytest restores warnings.showwarning after each test; start afresh
    logs.setup_logging()  # pytest's stderr is no terminal
    assert not hf_logging.is_progress_bar_enabled() and not datasets.is_progress_bar_enabled()
    warnings.warn("a library's deprecation", FutureWarning, stacklevel=1)
    assert re.search(r"^\d\d:\d\d:\d\d WARNING py\.warnings: .*a library's deprecation", capsys.readouterr().err, re.M)
