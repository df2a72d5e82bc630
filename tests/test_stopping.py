"""Clean stops (jobs/stopping.py) in this process: the first SIGTERM or SIGINT raises
`Stopped` with the shell's exit code, later ones are ignored, and the handlers go back. The
commands' own stops, end to end: tests/test_runner.py and tests/test_serve_stop.py."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from jobs import stopping
from jobs.stopping import Stopped, raise_on_stop_signals, restore, wait_for_stop_signal


@pytest.fixture
def handlers():
    """The test's signal handlers put back afterwards, whatever the code under test left."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for s, h in saved.items():
        signal.signal(s, h)


@pytest.mark.parametrize("signum, name, code", [(signal.SIGTERM, "SIGTERM", 143), (signal.SIGINT, "SIGINT", 130)])
def test_a_stop_names_its_signal_and_exits_as_a_shell_reports_it(signum, name, code):
    stop = Stopped(signum)
    assert (stop.signum, stop.name, stop.exit_code, str(stop)) == (signum, name, code, f"stopped by {name}")
    assert not isinstance(stop, Exception)  # a job's `except Exception` cannot swallow it


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_the_first_signal_raises_and_later_ones_are_ignored(signum, handlers):
    previous = raise_on_stop_signals()
    assert set(previous) == {signal.SIGTERM, signal.SIGINT}
    with pytest.raises(Stopped) as stop:
        os.kill(os.getpid(), signum)
        signal.pause()  # not reached when the handler has raised already
    assert stop.value.signum == signum
    # the clean-up that follows is not cut short by a second signal of either kind
    assert signal.getsignal(signal.SIGTERM) == signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGINT)


def test_restore_puts_back_the_handlers_it_replaced(handlers):
    def mine(signum, frame):
        pass

    signal.signal(signal.SIGTERM, mine)
    previous = raise_on_stop_signals()
    assert previous[signal.SIGTERM] is mine
    assert signal.getsignal(signal.SIGTERM) is stopping._raise_stopped
    assert signal.getsignal(signal.SIGINT) is stopping._raise_stopped
    restore(previous)
    assert signal.getsignal(signal.SIGTERM) is mine
    restore(None)  # outside the main thread nothing was installed: nothing to put back
    assert signal.getsignal(signal.SIGTERM) is mine


def test_outside_the_main_thread_the_callers_handlers_stay(handlers):
    before = signal.getsignal(signal.SIGTERM)
    got = []
    worker = threading.Thread(target=lambda: got.append(raise_on_stop_signals()))
    worker.start()
    worker.join()
    assert got == [None] and signal.getsignal(signal.SIGTERM) is before


def test_waiting_for_a_stop_ends_only_with_the_stop(monkeypatch):
    pauses = []

    def pause():  # a signal that is not a stop wakes pause() without raising; the stop raises
        pauses.append(1)
        if len(pauses) == 3:
            raise Stopped(signal.SIGTERM)

    monkeypatch.setattr(signal, "pause", pause)
    with pytest.raises(Stopped):
        wait_for_stop_signal()
    assert len(pauses) == 3
