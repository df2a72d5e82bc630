"""Reading other processes from /proc (Linux): command lines, parents, and whether a process's
memory holds some bytes. The drills (drills/) find Ray's workers and sandboxes by these, tests
find the processes they started, and the secret scan (drills/secret_scan.py) looks into Ray's
GCS with memory_holds."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


def pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def cmdline(pid: int) -> bytes:
    """The process's NUL-separated argv; b"" once it is gone."""
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    return b""


def ppid(pid: int) -> int:
    """The parent's pid; 0 once the process is gone (the command name may hold spaces and
    parentheses, so the fields are read after its last ')')."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return 0


def pids_titled(title: str) -> list[int]:
    """Processes whose command line starts with `title` (Ray names a worker `ray::<task or actor>`)."""
    return [p for p in pids() if cmdline(p).startswith(title.encode())]


def pids_naming(text: str) -> list[int]:
    """Processes whose command line holds `text` anywhere (Ray passes its session dir to each of its
    processes, so a Ray's temp dir finds them all)."""
    return [p for p in pids() if text.encode() in cmdline(p)]


def lineage(pid: int, depth: int = 64) -> Iterator[int]:
    """`pid`, its parent, its grandparent, ... up to (not including) init, at most `depth` of them."""
    for _ in range(depth):
        yield pid
        pid = ppid(pid)
        if pid <= 1:
            return


def descendants(roots: set[int]) -> list[int]:
    """Live processes that are one of `roots` or descend from one (a Ray's processes and all they
    started, however they retitled themselves)."""
    return [p for p in pids() if any(q in roots for q in lineage(p))]


def memory_holds(pid: int, needle: bytes, writable: bool = False) -> bool:
    """Whether the process's readable memory (its vdso and vvar pages left out) holds `needle`;
    `writable`: only the pages it can also write (its heap and stacks, not its code or files)."""
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            fields = line.split()
            if "r" not in fields[1] or (writable and "w" not in fields[1]) or (
                    len(fields) > 5 and fields[5].startswith("[v")):
                continue
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            try:
                if needle in os.pread(mem.fileno(), hi - lo, lo):
                    return True
            except OSError:
                continue
    return False
