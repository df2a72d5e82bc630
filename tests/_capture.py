"""What this process wrote to stderr, without the lines Ray forwards from its workers.

With `log_to_driver=True`, the driver's log monitor writes the workers' output to the
driver's stderr from a thread of its own, so a replica still shutting down after an earlier
test can add a line (`(ServeReplica:... pid=...) INFO ...`) to the stderr a test captured.
"""

from __future__ import annotations

import re

FORWARDED = re.compile(r"^(\x1b\[[0-9;]*m)?\((?:[^()]*\bpid=\d+[^()]*|raylet[^()]*)\)")


def own_lines(err: str) -> str:
    """`err` without Ray's forwarded worker lines (those start with `(Name pid=N)` or `(raylet)`)."""
    return "".join(line for line in err.splitlines(keepends=True) if not FORWARDED.match(line))
