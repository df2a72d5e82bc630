"""Typed configs from YAML: dataclasses validated by pydantic, errors that name the field.

    cfg = load_config("configs/soar-demo.yaml", SoarConfig, overrides=["search.samples=64"])

YAML files hold only overrides of the dataclass defaults. Unknown keys are errors (a typo
must not silently fall back to a default); wrong types name the dotted field path.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

import pydantic
import yaml

T = TypeVar("T")


class ConfigError(ValueError):
    """A config file or override is wrong; the message names the file and field."""


def _check_keys(cls: type, data: Any, path: str) -> None:
    """Reject keys the dataclass does not have, recursively through nested dataclasses."""
    if not (dataclasses.is_dataclass(cls) and isinstance(data, dict)):
        return
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls) if f.init}
    for key, value in data.items():
        where = f"{path}{key}"
        if key not in fields:
            raise ConfigError(f"unknown field {where!r}; known fields here: {sorted(fields)}")
        _check_keys(hints[key], value, f"{where}.")


def _format(error: pydantic.ValidationError) -> str:
    parts = []
    for e in error.errors():
        field = ".".join(str(p) for p in e["loc"] if not str(p).startswith("function-"))
        if e["type"] == "value_error":  # a dataclass's own __post_init__ check: its message names the field
            message = str(e["ctx"]["error"])
            parts.append(f"{field}: {message}" if field else message)
        else:
            parts.append(f"field {field!r}: {e['msg']} (got {e.get('input')!r})")
    return "; ".join(parts)


def build_config(cls: type[T], data: dict[str, Any] | None = None, source: str = "config") -> T:
    """Validate a mapping into the dataclass `cls` (nested dataclasses included)."""
    data = data or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of fields, got {type(data).__name__}")
    try:
        _check_keys(cls, data, "")
        return pydantic.TypeAdapter(cls).validate_python(data)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    except pydantic.ValidationError as e:
        raise ConfigError(f"{source}: {_format(e)}") from None
    except ValueError as e:  # a dataclass __post_init__ check
        raise ConfigError(f"{source}: {e}") from None


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `a.b=value` overrides (values parsed as YAML scalars/lists)."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} must look like field.sub=value")
        node = data
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: {p!r} is not a section")
        node[leaf] = yaml.safe_load(raw)
    return data


def load_config(path: str | Path | None, cls: type[T], overrides: list[str] | None = None) -> T:
    """Load YAML (or nothing: defaults) plus overrides into the dataclass `cls`."""
    data: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        p = Path(path)
        if not p.exists():
            raise ConfigError(f"config file {p} does not exist")
        try:
            data = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"config file {p} is not valid YAML: {e}") from None
        source = str(p)
    return build_config(cls, apply_overrides(data, overrides or []), source)


def to_dict(cfg: Any) -> dict[str, Any]:
    """The resolved config as plain data (for run dirs, the registry and checkpoints)."""
    return dataclasses.asdict(cfg)


def dump_yaml(cfg: Any, path: str | Path) -> None:
    """The resolved config as YAML, secrets redacted (the running job keeps the real values)."""
    Path(path).write_text(yaml.safe_dump(redact_secrets(to_dict(cfg)), sort_keys=False))


def config_hash(cfg: Any) -> str:
    """A short hash of the resolved config (secrets redacted: rotating a key is no new run)."""
    data = redact_secrets(to_dict(cfg) if dataclasses.is_dataclass(cfg) else cfg)
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


# --- secrets: what is written to disk, the store and logs never carries them ---------------
REDACTED = "***"
# a key is secret when its last word is one of these (api_key, hf_token, client_secret, ...),
# but not a tokenizer's special tokens (pad_token: "<pad>") or counts (max_tokens)
_SECRET_KEY = re.compile(r"(^|[_-])(api[_-]?key|apikey|password|passwd|secret|token|credentials?)$", re.I)
_NOT_SECRET = re.compile(r"^(pad|eos|bos|unk|sep|cls|mask)_token$", re.I)
_URL_PASSWORD = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:/@\s]*):(?P<pw>[^@/\s]+)@")


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(key)) and not _NOT_SECRET.match(key)


def redact_url(value: str) -> str:
    """Every `scheme://user:password@` in `value` with the password replaced by ***."""
    return _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", value)


def redact_secrets(data: Any) -> Any:
    """A copy of plain config data with secret-named fields and URL passwords replaced by ***.

    Empty/None secrets stay as they are (nothing to hide, and "no key" stays visible).
    """
    if isinstance(data, dict):
        return {k: (REDACTED if isinstance(k, str) and is_secret_key(k) and v not in (None, "")
                    else redact_secrets(v)) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return type(data)(redact_secrets(v) for v in data)
    if isinstance(data, str):
        return redact_url(data)
    return data


def secret_values(data: Any) -> set[str]:
    """The secret strings inside config data (secret-named fields, URL passwords), for log filters."""
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        data = to_dict(data)
    found: set[str] = set()
    if isinstance(data, dict):
        for k, v in data.items():
            if isinstance(k, str) and is_secret_key(k) and isinstance(v, str | int) and str(v):
                found.add(str(v))
            else:
                found |= secret_values(v)
    elif isinstance(data, list | tuple):
        for v in data:
            found |= secret_values(v)
    elif isinstance(data, str):
        found |= {m["pw"] for m in _URL_PASSWORD.finditer(data)}
    return found


class RedactingFilter(logging.Filter):
    """Replaces known secret values and URL passwords in every log record it sees.

    Installed on every root handler of every process by common.logs, so a library that logs
    a URL or an engine's kwargs never writes the secret into a job's log.
    """

    def __init__(self, secrets: Iterable[str] = ()):
        super().__init__()
        self.secrets: list[str] = []
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        """Blank these too (longest first, so a secret containing another is blanked whole)."""
        self.secrets = sorted({*self.secrets, *(s for s in secrets if len(s) >= 4)}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        for s in self.secrets:
            text = text.replace(s, REDACTED)
        return redact_url(text)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = self.redact(message)
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if clean != message:
            record.msg, record.args = clean, None
        return True
