"""One way to get a Redis client: RATCHET_REDIS_URL, or the machine's local server.

redis-py clients are not picklable: pass no client to a Ray actor; call `connect()` inside it.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from common.secrets import secret_from_environment
from store.server import ensure_local_server

ENV_URL = "RATCHET_REDIS_URL"
ENV_URL_FILE = "RATCHET_REDIS_URL_FILE"  # a file holding the URL: only its path enters a job's runtime env
CONNECT_TIMEOUT_S = 3.0
SOCKET_TIMEOUT_S = 30.0
# A command that meets a restarting server (connection refused, LOADING) is retried for about
# a minute: the local server comes back on the same socket with the same password. A WATCHed
# transaction (the archive's fenced writes) is not retried: its caller sees the error.
RECONNECT = dict(retries=12, base=0.1, cap=8.0)


class StoreUnavailable(RuntimeError):
    """Redis could not be reached; the message says where and what to do."""


def redact(url: str) -> str:
    """The URL without its password, for error messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


def configured_url() -> str | None:
    """$RATCHET_REDIS_URL, else the file named by $RATCHET_REDIS_URL_FILE, else None. The URL holds
    Redis's password, so the file is read as every secret file is (common.secrets: owner-only)."""
    try:
        return secret_from_environment(ENV_URL, ENV_URL_FILE, what="the Redis URL file")
    except ValueError as e:
        raise StoreUnavailable(f"{ENV_URL_FILE}={os.environ.get(ENV_URL_FILE)}: {e}") from e


def resolve_url(url: str | None = None) -> str:
    """The URL to use: explicit, else $RATCHET_REDIS_URL, else the file named by
    $RATCHET_REDIS_URL_FILE, else the local server (started if needed)."""
    return url or configured_url() or ensure_local_server().url


def connect(url: str | None = None) -> redis.Redis:
    """A checked client. Fails within seconds, naming the URL, when Redis cannot be reached.

    `rediss://` URLs use TLS and `redis://user:password@host` credentials, as redis-py parses them.
    """
    url = resolve_url(url)
    try:
        # probe with short timeouts first: a server that accepts but never answers fails fast
        with redis.Redis.from_url(url, socket_connect_timeout=CONNECT_TIMEOUT_S, socket_timeout=CONNECT_TIMEOUT_S) as probe:
            probe.ping()
        client = redis.Redis.from_url(
            url,
            socket_connect_timeout=CONNECT_TIMEOUT_S,
            socket_timeout=SOCKET_TIMEOUT_S,
            health_check_interval=30,
            retry=Retry(ExponentialBackoff(cap=RECONNECT["cap"], base=RECONNECT["base"]), RECONNECT["retries"],
                        supported_errors=(redis.ConnectionError, redis.TimeoutError)),  # LOADING is a ConnectionError
        )
    except redis.AuthenticationError as e:  # a ConnectionError subclass: catch it first
        raise StoreUnavailable(f"Redis at {redact(url)} refused the credentials: {e}") from e
    except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
        raise StoreUnavailable(
            f"cannot reach Redis at {redact(url)}: {e}. Check that the server runs and that "
            f"{ENV_URL} is right (unset it to use ratchet's own local server)."
        ) from e
    except ValueError as e:
        raise StoreUnavailable(f"{ENV_URL}={redact(url)!r} is not a Redis URL: {e}") from e
    return client
