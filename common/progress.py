"""Progress of a job's long phases: tqdm bars on a terminal, log lines at intervals elsewhere.

    with progress(total=len(todo), desc="[thought it0] sample", unit="q") as bar:
        ...; bar.update(len(batch))

$RATCHET_PROGRESS chooses: `auto` (default: bars when stderr is a terminal, else a log line
every $RATCHET_PROGRESS_INTERVAL seconds, 30 by default, and one when the phase ends: what
`ray job logs` and a redirected log can show), `bars`, `log` or `off`. Bars go to stderr;
log lines through the `ratchet.progress` logger (common.logs' format and redaction).
"""

from __future__ import annotations

import logging
import os
import re
import sys
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


class _LogWriter:
    """A file for tqdm that turns each status it draws into one log line: INFO while a phase
    runs (a long phase's heartbeat in `ray job logs`), DEBUG for its first and last lines (0%
    and 100%: the loop's own line per step says what the phase did; run.log keeps them)."""

    def write(self, text: str) -> None:
        line = _CURSOR.sub("", text).strip("\r\n ")
        if not line:
            return
        line = _RATE.sub(lambda m: f"{num(float(m.group(1)))}{m.group(2)}", line)  # 26625.22it/s -> 26,625it/s
        counts = _COUNTS.search(line)
        edge = counts is not None and (counts.group(1) == "0" or counts.group(1) == counts.group(2))
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


def progress(total: int | None = None, desc: str = "", unit: str = "it", initial: int = 0, disable: bool = False,
             **kwargs: Any) -> tqdm:
    """A tqdm bar (use as a context manager or close it) in the mode $RATCHET_PROGRESS chooses;
    `disable` turns it off whatever the mode (a caller's own quiet switch)."""
    chosen = mode()
    if chosen == "bars":
        return tqdm(total=total, desc=desc, unit=unit, initial=initial, file=sys.stderr, dynamic_ncols=True,
                    disable=disable, **kwargs)
    interval = float(os.environ.get(ENV_INTERVAL, "30"))
    kwargs.pop("leave", None)  # a log line, once written, stays: the closing line is the phase's result
    return tqdm(total=total, desc=desc, unit=unit, initial=initial, file=_LogWriter(), disable=disable or chosen == "off",
                mininterval=interval, maxinterval=max(interval, 10.0), bar_format=LOG_BAR_FORMAT, ascii=True,
                leave=True, **kwargs)
