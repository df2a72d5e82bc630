"""Progress of a job's long phases: tqdm bars on a terminal, log lines at intervals elsewhere.

    with progress(total=len(todo), desc="[thought it0] sample", unit="q") as bar:
        ...; bar.update(len(batch))

$RATCHET_PROGRESS chooses: `auto` (default: bars when stderr is a terminal, else a log line
every $RATCHET_PROGRESS_INTERVAL seconds, 30 by default, and one when the phase ends: what
`ray job logs` and a redirected log can show), `bars`, `log` or `off`. Bars go to stderr;
log lines through the `ratchet.progress` logger (common.logs' format and redaction).

tqdm draws only when `update()` is called, so a phase whose unit takes minutes (a batch of
questions on the transformers engine on a CPU) would say nothing meanwhile: each bar has a
heartbeat thread that redraws it when it has not drawn for its period (the interval for log
lines, a second for bars), whatever the engine or the size of the units.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import weakref
from typing import Any

from tqdm import tqdm

from common.fmt import num

ENV_MODE = "RATCHET_PROGRESS"
ENV_INTERVAL = "RATCHET_PROGRESS_INTERVAL"
MODES = ("auto", "bars", "log", "off")
LOG_BAR_FORMAT = "{desc}: {n_fmt}/{total_fmt} ({percentage:3.0f}%) [{elapsed}<{remaining}, {rate_fmt}]"

log = logging.getLogger("ratchet.progress")
_CURSOR = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # a nested bar's cursor moves: nothing in a log line
_RATE = re.compile(r"(\d+\.\d+)(\S*/s)\b")  # tqdm's rate: two decimals whatever its size
_COUNTS = re.compile(r": (\d+)/(\S+) \(")  # LOG_BAR_FORMAT's n/total
BARS_HEARTBEAT_S = 1.0  # a terminal bar's elapsed time moves every second while its count does not


class _LogWriter:
    """A file for one tqdm bar that turns each status it draws into one log line: INFO while a
    phase runs (a long phase's heartbeat in `ray job logs`, 0/48 included while the first
    batch runs), DEBUG for its first and last lines (the start and 100%: the loop's own line
    per step says what the phase did; run.log keeps them)."""

    def __init__(self) -> None:
        self.started = False

    def write(self, text: str) -> None:
        line = _CURSOR.sub("", text).strip("\r\n ")
        if not line:
            return
        line = _RATE.sub(lambda m: f"{num(float(m.group(1)))}{m.group(2)}", line)  # 26625.22it/s -> 26,625it/s
        counts = _COUNTS.search(line)
        edge = not self.started or (counts is not None and counts.group(1) == counts.group(2))
        self.started = True
        log.log(logging.DEBUG if edge else logging.INFO, line)

    def flush(self) -> None:
        pass


def mode() -> str:
    chosen = os.environ.get(ENV_MODE, "auto").lower()
    if chosen not in MODES:
        raise ValueError(f"{ENV_MODE}={chosen!r} is not one of {MODES}; unset it for bars on a terminal, "
                         "log lines elsewhere")
    if chosen == "auto":
        return "bars" if sys.stderr.isatty() else "log"
    return chosen


class _Bar(tqdm):
    """A tqdm bar with a heartbeat: redrawn when it has not drawn for `heartbeat_s` seconds."""

    def __init__(self, *args: Any, heartbeat_s: float, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._stopped = threading.Event()
        if not self.disable and heartbeat_s > 0:  # the thread holds the bar weakly: a bar dropped unclosed stops it too
            threading.Thread(target=_beat, args=(weakref.ref(self), self._stopped, heartbeat_s), daemon=True,
                             name=f"progress heartbeat {self.desc}").start()

    def close(self) -> None:
        self._stopped.set()
        super().close()


def _beat(ref: weakref.ref, stopped: threading.Event, period: float) -> None:
    while not stopped.wait(period):
        bar = ref()
        if bar is None or bar.disable:  # closed (tqdm disables a closed bar) or gone
            return
        with bar._lock:
            if not stopped.is_set() and bar._time() - bar.last_print_t >= period:
                bar.refresh(nolock=True)
                bar.last_print_t = bar._time()  # the next update() counts its interval from this line
        del bar


def progress(total: int | None = None, desc: str = "", unit: str = "it", initial: int = 0, disable: bool = False,
             **kwargs: Any) -> tqdm:
    """A tqdm bar (use as a context manager or close it) in the mode $RATCHET_PROGRESS chooses;
    `disable` turns it off whatever the mode (a caller's own quiet switch)."""
    chosen = mode()
    if chosen == "bars":
        return _Bar(total=total, desc=desc, unit=unit, initial=initial, file=sys.stderr, dynamic_ncols=True,
                    disable=disable, heartbeat_s=BARS_HEARTBEAT_S, **kwargs)
    interval = float(os.environ.get(ENV_INTERVAL, "30"))
    kwargs.pop("leave", None)  # a log line, once written, stays: the closing line is the phase's result
    return _Bar(total=total, desc=desc, unit=unit, initial=initial, file=_LogWriter(), disable=disable or chosen == "off",
                mininterval=interval, maxinterval=max(interval, 10.0), bar_format=LOG_BAR_FORMAT, ascii=True,
                leave=True, heartbeat_s=interval, **kwargs)
