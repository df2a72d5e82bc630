"""Plug-in points by import path: a user's judge, answer checker or task source named as `module:attr`.

Every workload loads a user's object the same way, before Redis or Ray start (the jobs'
`check`), so `--dry-run` refuses a name that does not import, an object of the wrong kind,
or a callable whose parameters do not fit, in one line that names the field and the fix.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Sequence
from typing import Any

from common.config import ConfigError


def is_import_path(spec: str) -> bool:
    """`module:attr` (a registered name such as `pairwise` is not one)."""
    module, sep, attr = spec.partition(":")
    return bool(sep and module and attr)


def load_object(field: str, spec: str, example: str) -> Any:
    """The object `spec` (`package.module:attr`, attr may be dotted) names; ConfigError if it does not."""
    if not is_import_path(spec):
        raise ConfigError(f"{field}={spec!r} must look like module:attr (e.g. {example})")
    module, _, attr = spec.partition(":")
    try:
        found: Any = importlib.import_module(module)
    except Exception as e:  # an ImportError, or the user's module failing as it imports
        raise ConfigError(f"{field}={spec!r}: module {module!r} does not import ({type(e).__name__}: {e}); "
                          "put it on PYTHONPATH or in the job's working dir (ray job submit --working-dir .)") from None
    for part in attr.split("."):
        if not hasattr(found, part):
            raise ConfigError(f"{field}={spec!r}: {module} has no attribute {attr!r}")
        found = getattr(found, part)
    return found


def load_function(field: str, spec: str, example: str) -> Any:
    """A callable `spec` names, whatever its parameters (a caller that knows its arguments
    uses load_callable, which checks them too)."""
    found = load_object(field, spec, example)
    if not callable(found):
        raise ConfigError(f"{field}={spec!r} is a {type(found).__name__}, not a function or class")
    return found


def load_callable(field: str, spec: str, example: str, args: Sequence[str] = (),
                  kwargs: dict[str, Any] | None = None) -> Any:
    """A callable that accepts positional `args` (named, for the message) and keyword `kwargs`."""
    found = load_function(field, spec, example)
    check_call(field, spec, found, args, kwargs or {})
    return found


def check_call(field: str, spec: str, fn: Any, args: Sequence[str], kwargs: dict[str, Any]) -> None:
    """ConfigError unless `fn(*args, **kwargs)` binds (a class: its __init__)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: trust it
        return
    try:
        signature.bind(*args, **kwargs)
    except TypeError as e:
        wanted = ", ".join([*args, *(f"{k}=..." for k in kwargs)])
        raise ConfigError(f"{field}={spec!r}: it is called as {fn.__name__}({wanted}) but its signature is "
                          f"{fn.__name__}{signature} ({e})") from None
