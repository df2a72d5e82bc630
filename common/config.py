"""Typed configs from YAML: dataclasses validated by pydantic, errors that name the field.

    cfg = load_config("configs/soar-demo.yaml", SoarConfig, overrides=["search.samples=64"])

YAML files hold only overrides of the dataclass defaults. Unknown keys are errors (a typo
must not silently fall back to a default) with a "did you mean"; wrong types name the dotted
field path and where the value came from (the file, or the command line). Values of fields
typed `str` stay the text that was written: YAML reads `00576224` (an ARC task id) as the
octal number 195732 and `2024` as an int, but a `str` field gets "00576224" and "2024".
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import re
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, TypeVar

import pydantic
import yaml

from common.redaction import redact_secrets

T = TypeVar("T")
COMMAND_LINE = "command line"
_SCALAR_TAGS = {f"tag:yaml.org,2002:{t}" for t in ("int", "float", "bool")}


class ConfigError(ValueError):
    """A config file or override is wrong; the message names where, the field, and the fix."""


# --- types: what a dotted path is, and whether it holds text --------------------------------
def _unwrap_optional(hint: Any) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return hint


def _is_text(hint: Any) -> bool:
    hint = _unwrap_optional(hint)
    if hint is str:
        return True
    return typing.get_origin(hint) is Literal and all(isinstance(a, str) for a in typing.get_args(hint))


def field_hints(cls: type) -> dict[str, Any]:
    """The init fields of a dataclass with their resolved type hints."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def _is_config_class(hint: Any) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def hint_at(cls: type, dotted: str) -> Any:
    """The type hint of a dotted field path (None when the path names no field)."""
    hint: Any = cls
    for part in dotted.split("."):
        hint = _unwrap_optional(hint)
        if not _is_config_class(hint):
            return None
        hint = field_hints(hint).get(part)
        if hint is None:
            return None
    return hint


def field_paths(cls: type, prefix: str = "") -> list[str]:
    """Every dotted field path of a config tree, sections included."""
    paths = []
    for name, hint in field_hints(cls).items():
        paths.append(prefix + name)
        if _is_config_class(_unwrap_optional(hint)):
            paths += field_paths(_unwrap_optional(hint), f"{prefix}{name}.")
    return paths


def _restore_text(hint: Any, value: Any, node: yaml.Node | None) -> Any:
    """`value` (as YAML built it from `node`) with every scalar at a text-typed position put
    back to the text that was written (`00576224`, not 195732)."""
    if node is None:
        return value
    plain = _unwrap_optional(hint)
    if isinstance(node, yaml.ScalarNode):
        return node.value if node.tag in _SCALAR_TAGS and _is_text(hint) else value
    if _is_config_class(plain) and isinstance(node, yaml.MappingNode) and isinstance(value, dict):
        hints = field_hints(plain)
        for key_node, value_node in node.value:
            key = key_node.value
            if key in hints and key in value:
                value[key] = _restore_text(hints[key], value[key], value_node)
        return value
    origin, args = typing.get_origin(plain), typing.get_args(plain)
    if origin in (list, tuple, set, frozenset) and args and isinstance(node, yaml.SequenceNode) \
            and isinstance(value, list) and len(value) == len(node.value):
        return [_restore_text(args[0], v, n) for v, n in zip(value, node.value, strict=True)]
    if origin is dict and len(args) == 2 and isinstance(node, yaml.MappingNode) and isinstance(value, dict):
        for key_node, value_node in node.value:
            if key_node.value in value:
                value[key_node.value] = _restore_text(args[1], value[key_node.value], value_node)
    return value


def parse_yaml(text: str, hint: Any = None) -> Any:
    """YAML text as data; with a type hint, scalars at `str` positions keep their text."""
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    if node is None:
        return None
    value = yaml.SafeLoader("").construct_document(node)
    return _restore_text(hint, value, node) if hint is not None else value


# --- checking and building ------------------------------------------------------------------
def _type_name(hint: Any) -> str:
    hint = _unwrap_optional(hint)
    if typing.get_origin(hint) is Literal:
        return " | ".join(repr(a) for a in typing.get_args(hint))
    return getattr(hint, "__name__", None) if not typing.get_args(hint) else str(hint).replace("typing.", "")


def _unknown(root: type, where: str, known: Iterable[str]) -> str:
    """The message for an unknown field: a rename, a close name here, or the same name elsewhere."""
    renamed = getattr(root, "renamed_fields", {})
    if where in renamed:
        return f"field {where!r} was renamed: use {renamed[where]!r} instead"
    parent, _, key = where.rpartition(".")
    prefix = f"{parent}." if parent else ""
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    if close:
        hint = f"did you mean {prefix + close[0]!r}?"
    else:
        # the same (or a close) name in another section: `num_actors` -> `sampler.num_actors`
        paths = field_paths(root)
        elsewhere = ([p for p in paths if p.rpartition(".")[2] == key] or
                     [p for p in paths if difflib.get_close_matches(key, [p.rpartition(".")[2]], cutoff=0.8)])
        hint = (f"did you mean {elsewhere[0]!r}?" if elsewhere else
                f"known fields{' of ' + parent if parent else ''}: {', '.join(sorted(known))}")
    return f"unknown field {where!r}; {hint}"


def _check_keys(root: type, cls: Any, data: Any, path: str, origin: typing.Callable[[str], str]) -> None:
    """Reject keys the dataclass does not have, recursively through nested dataclasses."""
    cls = _unwrap_optional(cls)
    if not (_is_config_class(cls) and isinstance(data, dict)):
        return
    hints = field_hints(cls)
    for key, value in data.items():
        where = f"{path}{key}"
        if key not in hints:
            raise ConfigError(f"{origin(where)}: {_unknown(root, where, hints)}")
        _check_keys(root, hints[key], value, f"{where}.", origin)


def _loc(e: dict[str, Any]) -> str:
    # pydantic's loc for a dataclass field: ('inner', 'k'); a list item adds its index
    return ".".join(str(p) for p in e["loc"] if not str(p).startswith("function-"))


def _describe(cls: type, e: dict[str, Any]) -> str:
    field = _loc(e)
    if e["type"] == "value_error":  # a dataclass's own __post_init__ check: its message names the field
        return str(e["ctx"]["error"])
    dotted = ".".join(str(p) for p in e["loc"] if isinstance(p, str) and not p.startswith("function-"))
    hint = hint_at(cls, dotted)
    expected = f"; set it to a value of type {_type_name(hint)}" if hint is not None else ""
    return f"field {field!r}: {e['msg'].rstrip('.')} (got {e.get('input')!r}){expected}"


def _origins(sources: dict[str, str], default: str) -> typing.Callable[..., str]:
    """Where the value at a dotted path came from: the command line wins over a file. A check
    of the whole config (no path) is traced through the field names its message mentions."""
    def origin(path: str, message: str = "") -> str:
        def related(k: str) -> bool:
            if not path:
                return bool(re.search(rf"(?<![\w.]){re.escape(k)}\b", message))
            return path == k or path.startswith(k + ".") or k.startswith(path + ".")
        hits = [(k, s) for k, s in sources.items() if related(k)]
        cli = [s for k, s in hits if s.startswith(COMMAND_LINE)]
        return (cli or [s for _, s in hits] or [default])[-1]
    return origin


def _flatten_keys(data: Any, prefix: str = "") -> list[str]:
    if not isinstance(data, dict):
        return []
    keys = []
    for k, v in data.items():
        keys.append(f"{prefix}{k}")
        keys += _flatten_keys(v, f"{prefix}{k}.")
    return keys


def build_config(cls: type[T], data: dict[str, Any] | None = None, source: str = "config",
                 sources: dict[str, str] | None = None) -> T:
    """Validate a mapping into the dataclass `cls` (nested dataclasses included).

    `sources` maps dotted keys to where they were set (a file, the command line); errors
    name that place, else `source`.
    """
    data = data or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of fields, got {type(data).__name__}")
    origin = _origins(sources or {}, source)
    _check_keys(cls, cls, data, "", origin)
    try:
        return pydantic.TypeAdapter(cls).validate_python(data)
    except pydantic.ValidationError as error:
        parts = []
        for e in error.errors():
            message = _describe(cls, e)
            parts.append(f"{origin(_loc(e), message)}: {message}")
        raise ConfigError("; ".join(parts)) from None
    except ValueError as e:  # a dataclass __post_init__ check outside pydantic's wrapping
        raise ConfigError(f"{origin('', str(e))}: {e}") from None


def apply_overrides(data: dict[str, Any], overrides: list[str], cls: type | None = None,
                    sources: dict[str, str] | None = None) -> dict[str, Any]:
    """Apply `a.b=value` overrides (values parsed as YAML; a `str` field of `cls` keeps the text)."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key or key.startswith("-"):
            raise ConfigError(f"{COMMAND_LINE}: {item!r} is not an override; write field.sub=value "
                              "(e.g. experiment=my-run)")
        node = data
        *parents, leaf = key.split(".")
        for i, p in enumerate(parents):
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{COMMAND_LINE} {item!r}: {'.'.join(parents[:i + 1])!r} is not a section")
        hint = hint_at(cls, key) if cls is not None else None
        try:
            value = parse_yaml(raw, hint)
        except yaml.YAMLError as e:
            if not _is_text(hint):
                raise ConfigError(f"{COMMAND_LINE} {item!r}: the value is not valid YAML "
                                  f"({str(e).splitlines()[0]}); quote it") from None
            value = raw
        # a text field takes the text as written (`thought_marker=Work:` is no YAML mapping),
        # YAML's quotes removed; null stays None only where the field allows it
        if _is_text(hint) and not isinstance(value, str) and not (value is None and hint is not str):
            value = raw
        node[leaf] = value
        if sources is not None:
            for k in [k for k in sources if k == key or k.startswith(key + ".")]:
                del sources[k]
            sources[key] = f"{COMMAND_LINE} ({item})"
    return data


def read_yaml_file(path: str | Path, cls: type | None = None) -> dict[str, Any]:
    """A config file's mapping (text kept at `str` fields of `cls`); errors name the file."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {p} does not exist; pass --config an existing YAML file (see configs/)")
    try:
        data = parse_yaml(p.read_text(), cls) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {p} is not valid YAML: {' '.join(str(e).split())}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping of fields, got {type(data).__name__}")
    return data


def load_config(path: str | Path | None, cls: type[T], overrides: list[str] | None = None,
                sources: dict[str, str] | None = None) -> T:
    """Load YAML (or nothing: defaults) plus overrides into the dataclass `cls`. A `sources`
    dict is filled with where each set key came from (for `with_origin`)."""
    data: dict[str, Any] = {}
    sources = {} if sources is None else sources
    if path is not None:
        data = read_yaml_file(path, cls)
        sources.update(dict.fromkeys(_flatten_keys(data), str(path)))
    data = apply_overrides(data, overrides or [], cls, sources)
    return build_config(cls, data, "defaults", sources)


_LEADING_FIELD = re.compile(r"([A-Za-z_][\w-]*(?:\.[\w-]+)*)(?==|:)")


def with_origin(message: str, cls: type, sources: dict[str, str]) -> str:
    """A check's message that starts with a field (`model='ckpt/x': no such ...`, as the jobs'
    checks word them) prefixed by where that value was set: the file, the command line or the
    defaults, as build_config's errors are. Other messages come back as they are."""
    m = _LEADING_FIELD.match(message)
    if m is None:
        return message
    parts = m[1].split(".")
    while parts and hint_at(cls, ".".join(parts)) is None:  # mix.checkpoints.<name>: the dict field
        parts.pop()
    return f"{_origins(sources, 'defaults')('.'.join(parts))}: {message}" if parts else message


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
