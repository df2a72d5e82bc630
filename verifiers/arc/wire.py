"""The worker's framing, and the two buffers that program code and output pass through.

Stdlib only: imported by zygote.py, which runs as a script beside it. Frames are a 4-byte
big-endian length and a body: JSON for control requests and replies, b"R" + UTF-8 source
for a program; a run's reply frame is followed by ``out_len`` raw bytes of its output.
"""

from __future__ import annotations

import json
import mmap
import os
import struct


def read_frame(fd: int) -> dict | None:
    head = _read_exact(fd, 4)
    if head is None:
        return None
    body = _read_exact(fd, struct.unpack(">I", head)[0])
    return None if body is None else json.loads(body)


def _read_exact(fd: int, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def write_frame(fd: int, obj: dict) -> None:
    body = json.dumps(obj, separators=(",", ":")).encode()
    data = struct.pack(">I", len(body)) + body
    while data:
        data = data[os.write(fd, data):]


# Program code and program output pass through this process only in these two buffers,
# never as Python objects, and are zeroed as soon as they are passed on: freed memory is
# not erased, and every later child is a copy of this process's memory (a program read an
# earlier program's comment with ctypes.string_at before this). Neither is even mapped in
# a child: a child gets its code through a pipe of its own (fork_runner._spawn).
# Private anonymous mappings, not bytearrays: pages never written are not resident, so
# they cost a fork nothing, and a wipe (MADV_DONTNEED) zeroes pages by dropping them.
READ_CHUNK = 65536


def buffer(size: int, *, inherit: bool) -> mmap.mmap:
    buf = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if not inherit:  # not even mapped in children
        buf.madvise(mmap.MADV_DONTFORK)
    return buf


def wipe(buf: mmap.mmap, n: int) -> None:
    if n > 0:
        buf.madvise(mmap.MADV_DONTNEED, 0, n)  # private anonymous: reads as zeros after


INBUF = buffer(1 << 20, inherit=False)  # one request frame
OUTBUF = buffer(READ_CHUNK, inherit=False)  # a child's output, max_result_bytes + a read


def read_request(fd: int) -> int | None:
    """Read one frame into INBUF; returns its length, None at EOF."""
    global INBUF
    head = _read_exact(fd, 4)
    if head is None:
        return None
    n = struct.unpack(">I", head)[0]
    if n > len(INBUF):
        wipe(INBUF, len(INBUF))
        INBUF.close()
        INBUF = buffer(n, inherit=False)
    with memoryview(INBUF) as view:
        pos = 0
        while pos < n:
            k = os.readv(fd, [view[pos:n]])
            if not k:
                return None
            pos += k
    return n


def write_all(fd: int, data: memoryview) -> None:
    while data:
        data = data[os.write(fd, data):]
