"""Typed configs from YAML: dataclasses validated by pydantic, errors that name the field.

    cfg = load_config("configs/soar-demo.yaml", SoarConfig, overrides=["search.samples=64"])

YAML files hold only overrides of the dataclass defaults. Unknown keys are errors (a typo
must not silently fall back to a default); wrong types name the dotted field path.
"""

from __future__ import annotations

import dataclasses
import typing
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
    Path(path).write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
