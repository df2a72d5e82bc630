"""A private local redis-server for one machine, started on demand and shared.

It listens on a Unix socket in a directory only its user can enter (0700), with no TCP
port (Ray's head sits on 6379; a freed port could be taken by another local process and
receive the password), requires a generated password (kept in a 0600 file), and persists
with an append-only file. Every process on the machine (drivers, Ray actors on this node,
tests) finds it through its home directory; socket path and password stay the same across
restarts, so running clients reconnect. A cluster of several nodes needs a server they
can all reach: set RATCHET_REDIS_URL.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import redis

STATE_FILE = "server.json"
PASSWORD_FILE = "password"
DATA_LOCK = "server.lock"  # held by the running redis-server (an inherited fd)
START_TIMEOUT_S = 20.0  # to start listening; a server loading its AOF is waited for as long as it loads
MAX_SOCKET_PATH = 100  # bytes; the kernel's limit for a socket address is 108


def ratchet_home() -> Path:
    """Where ratchet keeps machine-local state (Redis data, seed models).

    Not the working directory: `ray job submit --working-dir .` runs jobs from a copy.
    """
    return Path(os.environ.get("RATCHET_HOME", Path.home() / ".cache" / "ratchet")).expanduser()


@dataclass(frozen=True)
class LocalServer:
    """How to reach a running local redis-server: a Unix socket, no TCP port."""

    socket: str  # path of its Unix socket, in a directory only this user can enter (0700)
    password: str
    pid: int
    data_dir: str

    @property
    def url(self) -> str:
        return f"unix://:{self.password}@{self.socket}?db=0"


def socket_path(data_dir: Path) -> Path:
    """Where the server of `data_dir` listens: the same path on every start, so running
    clients reconnect after a restart. Under the data dir when the path fits a socket
    address (108 bytes), else in a 0700 directory of its own under the temp dir."""
    path = data_dir / "sock" / "redis.sock"
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        digest = hashlib.sha256(os.fsencode(data_dir.resolve())).hexdigest()[:16]
        path = Path(tempfile.gettempdir()) / f"ratchet-{os.getuid()}-{digest}" / "redis.sock"
    return path


def _private_dir(path: Path) -> None:
    """A directory only this user can enter; refuse one somebody else owns."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_uid != os.getuid():
        raise RuntimeError(f"{path} belongs to another user; remove it or set RATCHET_HOME elsewhere")
    os.chmod(path, 0o700)


def _write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read, created with that mode (no window of exposure)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


def _probe(server: LocalServer) -> Literal["up", "loading", "down"]:
    """"loading": it answers, but is still reading its AOF (a big one takes a while)."""
    try:
        with redis.Redis(unix_socket_path=server.socket, password=server.password,
                         socket_connect_timeout=1, socket_timeout=2, retry=None) as client:
            client.ping()
        return "up"
    except redis.BusyLoadingError:
        return "loading"
    except (redis.RedisError, OSError):
        return "down"


def _alive(server: LocalServer) -> bool:
    return _probe(server) == "up"


def _read_state(data_dir: Path) -> LocalServer | None:
    path = data_dir / STATE_FILE
    if not path.exists():
        return None
    try:
        return LocalServer(**json.loads(path.read_text()))
    except (ValueError, TypeError):
        return None


def _password(data_dir: Path) -> str:
    """The data dir's password: made once and kept, so clients holding the URL reconnect."""
    path = data_dir / PASSWORD_FILE
    if path.exists() and (text := path.read_text().strip()):
        return text
    password = secrets.token_urlsafe(24)
    _write_private(path, password)
    return password


def _data_lock(data_dir: Path) -> int | None:
    """An fd holding the data dir's lock, or None when a running redis-server holds it."""
    fd = os.open(data_dir / DATA_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _pid(data_dir: Path) -> int:
    try:
        return int((data_dir / "redis.pid").read_text().strip())
    except (OSError, ValueError):
        return 0


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except (ProcessLookupError, FileNotFoundError, PermissionError):
        return False


def _redis_server_binary() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError(
            "redis-server is not installed and RATCHET_REDIS_URL is not set. "
            "Run `make setup` (it installs redis-server), or point RATCHET_REDIS_URL at a server."
        )
    return binary


def _config_text(sock: Path, password: str, data_dir: Path, fsync: str, extra: Sequence[str]) -> str:
    return "\n".join([
        "port 0",  # no TCP port: nobody else on the machine can take it or reach the server
        f"unixsocket {sock}",
        "unixsocketperm 700",
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
        *extra,
        "",
    ])


def running_local_server(data_dir: Path | None = None) -> LocalServer | None:
    """The machine's local server if one answers; never starts one."""
    state = _read_state(Path(data_dir or ratchet_home() / "redis"))
    return state if state is not None and _alive(state) else None


def ensure_local_server(
    data_dir: Path | None = None, fsync: Literal["always", "everysec"] = "always", extra_config: Sequence[str] = (),
) -> LocalServer:
    """Return the machine's local server, starting it if none runs on `data_dir`.

    Safe to call from many processes at once: a file lock serialises the start, and the
    server holds a lock on its data dir for as long as it runs, so a second redis-server is
    never started on the same files (even when the first does not answer yet: it may still
    be loading its AOF, which is waited for, however long it takes). Address and password
    stay the same across restarts. `extra_config`: more redis.conf lines (tests use it).
    """
    data_dir = Path(data_dir or ratchet_home() / "redis")
    _private_dir(data_dir)
    sock = socket_path(data_dir)
    _private_dir(sock.parent)
    with open(data_dir / "start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        password = _password(data_dir)
        deadline = time.monotonic() + START_TIMEOUT_S
        while (held := _data_lock(data_dir)) is None:
            if _running(_pid(data_dir)):  # a redis-server runs on these files: wait for it, never start another
                server = _wait_ready(LocalServer(str(sock), password, _pid(data_dir), str(data_dir)), data_dir)
                _write_private(data_dir / STATE_FILE, json.dumps(server.__dict__))
                return server
            if time.monotonic() > deadline:  # a killed server's last process lets go of it within moments
                raise RuntimeError(f"{data_dir / DATA_LOCK} stays locked but no redis-server runs from {data_dir}; "
                                   "find the process holding it (`lslocks`) and stop it")
            time.sleep(0.05)
        try:
            conf = data_dir / "redis.conf"
            _write_private(conf, _config_text(sock, password, data_dir, fsync, extra_config))
            # the daemon inherits the lock's fd and holds the lock until it exits
            result = subprocess.run([_redis_server_binary(), str(conf)], capture_output=True, text=True,
                                    timeout=30, pass_fds=(held,))
        finally:
            os.close(held)
        if result.returncode != 0:
            raise RuntimeError(f"redis-server failed to start from {conf}: {result.stderr.strip()}")
        server = _wait_ready(LocalServer(str(sock), password, 0, str(data_dir)), data_dir)
        _write_private(data_dir / STATE_FILE, json.dumps(server.__dict__))
        return server


def _wait_ready(server: LocalServer, data_dir: Path) -> LocalServer:
    """Wait until the server answers: START_TIMEOUT_S to start listening, then for as long as
    it reports LOADING (reading its AOF) while its process lives."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while (state := _probe(server)) != "up":
        pid = _pid(data_dir)
        if state == "loading" and _running(pid):
            deadline = time.monotonic() + START_TIMEOUT_S  # making progress: keep waiting
        elif time.monotonic() > deadline:
            log = (data_dir / "redis.log").read_text()[-2000:] if (data_dir / "redis.log").exists() else ""
            raise RuntimeError(
                f"redis-server in {data_dir} (pid {pid or '?'}) did not answer on {server.socket} within "
                f"{START_TIMEOUT_S:.0f}s. Stop it (`python -m store down`, or kill the pid) and retry. Log:\n{log}")
        time.sleep(0.05)
    return LocalServer(server.socket, server.password, _pid(data_dir), server.data_dir)


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
    shutdown(redis.Redis(unix_socket_path=state.socket, password=state.password, socket_timeout=10, retry=None),
             state.pid)
    return True


def shutdown(client: redis.Redis, pid: int) -> None:
    """SHUTDOWN (which flushes the AOF) through `client`, then wait for process `pid` to go. The
    server closes the connection as it exits, so a ConnectionError here is the success."""
    with client, contextlib.suppress(redis.ConnectionError):
        client.shutdown()
    _wait_gone(pid)


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
