"""A private local redis-server for one machine, started on demand and shared.

Ray's head node listens on 6379, so the local server never does: it takes a free port,
binds loopback only, requires a generated password (kept in a 0600 file), and persists
with an append-only file. Every process on the machine (drivers, Ray actors, tests) finds
the running server through the state file in its home directory and reuses it.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import redis

RAY_DEFAULT_PORT = 6379
STATE_FILE = "server.json"
START_TIMEOUT_S = 20.0


def ratchet_home() -> Path:
    """Where ratchet keeps machine-local state (Redis data, seed models).

    Not the working directory: `ray job submit --working-dir .` runs jobs from a copy.
    """
    return Path(os.environ.get("RATCHET_HOME", Path.home() / ".cache" / "ratchet")).expanduser()


@dataclass(frozen=True)
class LocalServer:
    """How to reach a running local redis-server."""

    host: str
    port: int
    password: str
    pid: int
    data_dir: str

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@{self.host}:{self.port}/0"


def _free_port() -> int:
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port != RAY_DEFAULT_PORT:
            return port


def _write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read, created with that mode (no window of exposure)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


def _alive(server: LocalServer) -> bool:
    try:
        client = redis.Redis(
            host=server.host, port=server.port, password=server.password,
            socket_connect_timeout=1, socket_timeout=2,
        )
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False


def _read_state(data_dir: Path) -> LocalServer | None:
    path = data_dir / STATE_FILE
    if not path.exists():
        return None
    try:
        return LocalServer(**json.loads(path.read_text()))
    except (ValueError, TypeError):
        return None


def _redis_server_binary() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError(
            "redis-server is not installed and RATCHET_REDIS_URL is not set. "
            "Run `make setup` (it installs redis-server), or point RATCHET_REDIS_URL at a server."
        )
    return binary


def _config_text(port: int, password: str, data_dir: Path, fsync: str) -> str:
    return "\n".join([
        "bind 127.0.0.1",
        "protected-mode yes",
        f"port {port}",
        f"requirepass {password}",
        "daemonize yes",
        f"pidfile {data_dir / 'redis.pid'}",
        f"logfile {data_dir / 'redis.log'}",
        f"dir {data_dir}",
        "appendonly yes",
        # "always": a write acknowledged to a client is on disk before the reply, so a
        # crashed (SIGKILLed) server loses nothing; pipelined batches share one fsync.
        f"appendfsync {fsync}",
        "save ''",
        "",
    ])


def running_local_server(data_dir: Path | None = None) -> LocalServer | None:
    """The machine's local server if one answers; never starts one."""
    state = _read_state(Path(data_dir or ratchet_home() / "redis"))
    return state if state is not None and _alive(state) else None


def ensure_local_server(
    data_dir: Path | None = None, fsync: Literal["always", "everysec"] = "always"
) -> LocalServer:
    """Return the machine's local server, starting it if none answers.

    Safe to call from many processes at once: a file lock serialises the start.
    """
    data_dir = Path(data_dir or ratchet_home() / "redis")
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(data_dir / "start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = _read_state(data_dir)
        if state is not None and _alive(state):
            return state
        port, password = _free_port(), secrets.token_urlsafe(24)
        conf = data_dir / "redis.conf"
        _write_private(conf, _config_text(port, password, data_dir, fsync))
        result = subprocess.run(
            [_redis_server_binary(), str(conf)], capture_output=True, text=True, timeout=30
        )
        if result.returncode != 0:
            raise RuntimeError(f"redis-server failed to start from {conf}: {result.stderr.strip()}")
        server = LocalServer("127.0.0.1", port, password, 0, str(data_dir))
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _alive(server):  # the daemon forks; wait until it loaded its AOF and answers
            if time.monotonic() > deadline:
                log = (data_dir / "redis.log").read_text()[-2000:] if (data_dir / "redis.log").exists() else ""
                raise RuntimeError(f"redis-server in {data_dir} did not answer within {START_TIMEOUT_S}s. Log:\n{log}")
            time.sleep(0.05)
        pid = int((data_dir / "redis.pid").read_text().strip())
        server = LocalServer("127.0.0.1", port, password, pid, str(data_dir))
        _write_private(data_dir / STATE_FILE, json.dumps(server.__dict__))
        return server


def stop_local_server(data_dir: Path | None = None, kill: bool = False) -> bool:
    """Stop the local server (SHUTDOWN, which flushes the AOF; or SIGKILL to test crashes)."""
    data_dir = Path(data_dir or ratchet_home() / "redis")
    state = _read_state(data_dir)
    if state is None:
        return False
    if kill:
        try:
            os.kill(state.pid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        _wait_gone(state.pid)
        return True
    if not _alive(state):
        return False
    client = redis.Redis(host=state.host, port=state.port, password=state.password, socket_timeout=10)
    try:
        client.shutdown()
    except redis.ConnectionError:
        pass  # the server closes the connection as it exits: that is success
    _wait_gone(state.pid)
    return True


def _wait_gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            # a killed daemon whose parent has not reaped it yet is a zombie: it is gone
            if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                return
        except (ProcessLookupError, FileNotFoundError):
            return
        time.sleep(0.02)
    raise RuntimeError(f"redis-server pid {pid} did not exit within {timeout}s")
