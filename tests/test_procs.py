"""common/procs.py against a real child process: its command line, its parent, its memory."""

from __future__ import annotations

import os
import subprocess
import sys

from common.procs import (
    cmdline,
    descendants,
    lineage,
    memory_holds,
    pids,
    pids_naming,
    pids_titled,
    ppid,
)


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
        assert memory_holds(child.pid, f"held-{secret}".encode(), writable=True)  # a string it built: its heap
        assert child.pid in pids_naming(secret) and pids_naming(f"never-{os.urandom(8).hex()}") == []
        assert child.pid in pids_titled(sys.executable) and child.pid not in pids_titled("-c")
        assert child.pid in descendants({os.getpid()}) and descendants({child.pid}) == [child.pid]
        assert os.getpid() not in descendants({child.pid})  # a parent is no descendant
        up = list(lineage(child.pid))
        assert up[:2] == [child.pid, os.getpid()] and 1 not in up and list(lineage(child.pid, depth=1)) == [child.pid]
    finally:
        child.communicate("\n")
    assert child.pid not in pids() and cmdline(child.pid) == b"" and ppid(child.pid) == 0
    assert child.pid not in pids_naming(secret) and list(lineage(child.pid)) == [child.pid]  # gone: no parent


def test_writable_memory_leaves_out_what_the_process_only_reads(tmp_path):
    """A file the process maps read-only is in its memory, not in its writable memory (its heap)."""
    data = tmp_path / "data"
    data.write_bytes(f"mapped-{os.urandom(8).hex()}".encode())
    code = (f"import mmap; f = open({str(data)!r}, 'rb'); m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ); "
            "print('ready', flush=True); input()")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ready\n"
        assert memory_holds(child.pid, data.read_bytes())
        assert not memory_holds(child.pid, data.read_bytes(), writable=True)
    finally:
        child.communicate("\n")
