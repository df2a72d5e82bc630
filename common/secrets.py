"""Secrets by reference: a config names where a key is (`api_key_env: VAR`, `api_key_file: PATH`),
and only the process that uses it reads it.

    kwargs = resolve_secret_refs({"base_url": url, "api_key_env": "OPENAI_API_KEY"}, "engine_kwargs")
    # -> {"base_url": url, "api_key": "<the value of $OPENAI_API_KEY here>"}

Every secret ratchet uses is read here: a reference (resolve_secret_refs, in the process that
uses the key), a variable of a fixed name (secret_from_environment: the judge's OPENAI_API_KEY,
ratchet serve's RATCHET_API_KEY or its file), or a file only its owner reads (read_secret_file).

Why: whatever is passed to a Ray actor's constructor is kept in Ray's cluster state (the GCS
holds the actor's creation task with its arguments, and persists it to Redis with GCS fault
tolerance). A name or a path is harmless there; the key is read inside the actor, from the
environment of the node it runs on (as `ray start` was started there) or from a file only
its owner can read (as Kubernetes mounts a Secret, 0400).
"""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from common.redaction import is_secret_key, redact_url

REF_SUFFIXES = ("_env", "_file")


def read_secret_file(path: str | os.PathLike[str], what: str = "secret file") -> str:
    """The stripped contents of `path`, refusing a missing, empty or group/other-readable file."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{what} {path} does not exist or is not a file")
    mode = stat.S_IMODE(p.stat().st_mode)
    if mode & 0o077:
        raise ValueError(f"{what} {path} has mode {mode:04o}: others may read it; chmod 400 {path}")
    value = p.read_text().strip()
    if not value:
        raise ValueError(f"{what} {path} is empty")
    return value


def secret_from_environment(var: str, file_var: str = "", env: Mapping[str, str] | None = None,
                            what: str = "secret file") -> str | None:
    """A secret the environment holds under a fixed name: $var, else the file $file_var names
    (read_secret_file's checks), else None (OPENAI_API_KEY, RATCHET_API_KEY and RATCHET_API_KEY_FILE)."""
    env = os.environ if env is None else env
    if env.get(var):
        return env[var]
    if file_var and env.get(file_var):
        return read_secret_file(env[file_var], what)
    return None


def _ref(key: str) -> tuple[str, str] | None:
    """("api_key", "_env") for "api_key_env"; None for a key that is no secret reference."""
    for suffix in REF_SUFFIXES:
        if key.endswith(suffix) and is_secret_key(key[: -len(suffix)]):
            return key[: -len(suffix)], suffix
    return None


def resolve_secret_refs(kwargs: Mapping[str, Any], where: str = "engine_kwargs",
                        env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A copy of `kwargs` with each `<secret>_env` / `<secret>_file` replaced by `<secret>`
    holding the value read here (an empty reference is dropped: no key)."""
    env = os.environ if env is None else env
    out = {k: v for k, v in kwargs.items() if _ref(k) is None}
    for key, value in kwargs.items():
        ref = _ref(key)
        if ref is None or value in (None, ""):
            continue
        name, suffix = ref
        if name in kwargs:
            raise ValueError(f"{where}: give {name} or {key}, not both")
        if suffix == "_env":
            if not env.get(value):
                raise ValueError(f"{where}.{key}={value}: the environment variable {value} is not set (or empty) "
                                 f"on {socket.gethostname()}; set it where `ray start` runs on every node")
            out[name] = env[value]
        else:
            out[name] = read_secret_file(value, f"{where}.{key}")
    return out


def literal_secrets(kwargs: Mapping[str, Any]) -> list[str]:
    """The keys of `kwargs` that hold a secret itself (a secret-named key with a value, or a URL
    with a password), which must not travel to a Ray actor."""
    found = []
    for key, value in kwargs.items():
        if is_secret_key(key) and value not in (None, ""):
            found.append(key)
        elif isinstance(value, str) and redact_url(value) != value:
            found.append(key)
    return found
