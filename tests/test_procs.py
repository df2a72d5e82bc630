"""common/procs.py against a real child process: its command line, its parent, its memory."""

from __future__ import annotations

import os
import subprocess
import sys

from common.procs import cmdline, memory_holds, pids, ppid


def test_a_child_is_seen_while_it_lives_and_not_after():
    secret = os.urandom(8).hex()
    child = subprocess.Popen([sys.executable, "-c", f"s = 'held-' + {secret!r}; print('ready', flush=True); input()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ready\n"  # the string is built in its memory by now
        assert child.pid in pids() and ppid(child.pid) == os.getpid()
        assert cmdline(child.pid).split(b"\0")[:2] == [sys.executable.encode(), b"-c"]
        assert memory_holds(child.pid, f"held-{secret}".encode())
        assert not memory_holds(child.pid, f"never-{os.urandom(8).hex()}".encode())
    finally:
        child.communicate("\n")
    assert child.pid not in pids() and cmdline(child.pid) == b"" and ppid(child.pid) == 0
