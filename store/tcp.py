"""A redis-server on a TCP port with a password: the one Redis every node of a cluster reaches.

The machine-local server (store/server.py) listens on a Unix socket, which other machines
cannot reach. A cluster needs a server on the network: this starts one for a cluster on one
machine (scripts/cluster_demo.py, tests) or a trusted network, bound to the given address
only, with a generated password in a 0600 config file (never on a command line, where `ps`
would show it), AOF persistence and `appendfsync always` as the local one.

    server = start_tcp_server(Path("/srv/ratchet-redis"), host="127.0.0.1", port=16379)
    write_url_file(server.url, Path("/etc/ratchet/redis-url"))    # RATCHET_REDIS_URL_FILE
"""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from store.server import (
    START_TIMEOUT_S,
    _private_dir,
    _redis_server_binary,
    _write_private,
    shutdown,
)

RAY_PORT = 6379  # Ray's head takes it: never ours


@dataclass(frozen=True)
class TcpServer:
    host: str
    port: int
    password: str
    pid: int
    data_dir: str

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@{self.host}:{self.port}/0"


def start_tcp_server(data_dir: Path, *, host: str, port: int) -> TcpServer:
    """Start a redis-server bound to `host`:`port` only, with a new password; wait until it answers."""
    if port == RAY_PORT:
        raise ValueError(f"port {RAY_PORT} is Ray's head's: give the cluster's Redis another port")
    _private_dir(data_dir)
    password = secrets.token_urlsafe(24)
    conf = data_dir / "redis.conf"
    _write_private(conf, "\n".join([
        f"bind {host}", f"port {port}", "protected-mode yes", f"requirepass {password}",
        "daemonize yes", f"pidfile {data_dir / 'redis.pid'}", f"logfile {data_dir / 'redis.log'}",
        f"dir {data_dir}", "appendonly yes", "appendfsync always", "save ''", ""]))
    return _launch(conf, data_dir, host, port, password)


def restart_tcp_server(server: TcpServer) -> TcpServer:
    """Start a killed server again from its config (same port, password, append-only file), as
    a supervisor (systemd's Restart=, a Kubernetes pod) does; what was written comes back."""
    data_dir = Path(server.data_dir)
    return _launch(data_dir / "redis.conf", data_dir, server.host, server.port, server.password)


def _launch(conf: Path, data_dir: Path, host: str, port: int, password: str) -> TcpServer:
    result = subprocess.run([_redis_server_binary(), str(conf)], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise RuntimeError(f"redis-server failed to start from {conf}: {result.stderr.strip()}")
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            with redis.Redis(host=host, port=port, password=password, socket_timeout=2, retry=None) as client:
                client.ping()
            break
        except (redis.RedisError, OSError):
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server in {data_dir} did not answer on {host}:{port} within "
                                   f"{START_TIMEOUT_S:.0f}s; see {data_dir / 'redis.log'}") from None
            time.sleep(0.05)
    return TcpServer(host, port, password, int((data_dir / "redis.pid").read_text()), str(data_dir))


def stop_tcp_server(server: TcpServer) -> None:
    """Stop it (SHUTDOWN flushes the AOF) and wait for the process to go."""
    shutdown(redis.Redis(host=server.host, port=server.port, password=server.password, socket_timeout=10,
                         retry=None), server.pid)


def write_url_file(url: str, path: Path) -> None:
    """The URL in a file only its owner reads (mode 0600 from creation): RATCHET_REDIS_URL_FILE."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_private(path, url + "\n")
    os.chmod(path, 0o600)
