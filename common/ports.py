"""A free TCP port on the loopback interface, for the local servers tests, demos and benchmarks start."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port the kernel just handed out on 127.0.0.1 (free when asked; a server that binds it
    later can still lose a race with another process, which is why callers retry a failed start)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
