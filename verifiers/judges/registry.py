"""The judges by name or import path: `make_judge("programmatic")`, `make_judge("mypkg.judges:MyJudge")`.

The factory sits above the judges and their interface (base.py): each judge imports base,
and only this module names the judges, so the import graph has no circle. A judge is any
class whose instances have `name` and `async score(items) -> list[Verdict]` (base.Judge); a
user's own is named `module:Class` wherever a registered name is accepted (judge.kind).
`check_judge` loads it and checks its keyword arguments against the constructor's type
hints, so a config fails before anything starts, in one line.
"""

from __future__ import annotations

import inspect
from typing import Any

import pydantic
import yaml

from common.config import ConfigError
from common.plugins import is_import_path, load_object
from verifiers.judges.base import Judge

# name -> import path; imported on use (the reward model pulls in torch)
JUDGES: dict[str, str] = {
    "programmatic": "verifiers.judges.programmatic:ProgrammaticJudge",
    "reward_model": "verifiers.judges.reward_model:RewardModelJudge",
    "pairwise": "verifiers.judges.pairwise:PairwiseJudge",
}
EXAMPLE = "examples.judges:ShortCorrectJudge"


def register(name: str, path: str) -> None:
    """Make `name` mean the class at `path` (`module:Class`), e.g. in a plug-in package's __init__."""
    if not is_import_path(path):
        raise ValueError(f"register({name!r}, {path!r}): the path must look like module:Class")
    JUDGES[name] = path


def known_kind(kind: str) -> bool:
    """A registered name or something that looks like `module:Class` (whether it imports is check_judge's)."""
    return kind in JUDGES or is_import_path(kind)


def judge_class(kind: str, field: str = "judge.kind") -> type:
    """The class `kind` names; ConfigError (one line) when it is unknown, does not import or is no judge."""
    if not known_kind(kind):
        raise ConfigError(f"{field}={kind!r} is unknown; choose one of {sorted(JUDGES)} or name your own judge "
                          f"class as module:Class (e.g. {EXAMPLE})")
    cls = load_object(field, JUDGES.get(kind, kind), EXAMPLE)
    if not inspect.isclass(cls) or not inspect.iscoroutinefunction(getattr(cls, "score", None)):
        raise ConfigError(f"{field}={kind!r} is not a judge: a judge is a class with `async def score(self, items)` "
                          "returning one verifiers.judges.Verdict per JudgeItem (see docs/tpo.md)")
    return cls


def _hints(cls: type) -> dict[str, Any]:
    """The constructor's parameter hints, each resolved alone: one that does not resolve (a name
    only imported for type checkers) is left unchecked instead of hiding the others."""
    init = cls.__init__
    scope = getattr(inspect.getmodule(init), "__dict__", {})
    out = {}
    for name, hint in inspect.get_annotations(init).items():
        try:
            out[name] = eval(hint, dict(scope)) if isinstance(hint, str) else hint  # noqa: S307 (its own source)
        except Exception:
            continue
    return out


def check_kwargs(cls: type, kwargs: dict[str, Any], given: set[str], field: str = "judge.kwargs") -> None:
    """Each of `kwargs` is a parameter of cls's constructor, of its hinted type; `given` are the
    arguments the job passes itself (generate, checkpoint). ConfigError naming the first misfit."""
    params = inspect.signature(cls.__init__).parameters
    open_ended = any(p.kind is p.VAR_KEYWORD for p in params.values())
    hints = _hints(cls)
    for key, value in kwargs.items():
        if key in given:
            raise ConfigError(f"{field}.{key}: the job sets {key!r} itself (from judge.engine, judge.checkpoint, "
                              "judge.base_url); remove it from judge.kwargs")
        if key not in params:
            if open_ended:
                continue
            known = sorted(k for k, p in params.items() if k != "self" and k not in given
                           and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
            raise ConfigError(f"{field}.{key}: {cls.__name__} takes no argument {key!r}; it takes {known}")
        if key in hints:
            _check_type(f"{field}.{key}", value, hints[key], cls)
    missing = [k for k, p in params.items() if k != "self" and p.default is p.empty and k not in kwargs
               and k not in given and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if missing:
        raise ConfigError(f"{field}: {cls.__name__} needs {missing}; set them as {field}.<name>=value")


def _check_type(field: str, value: Any, hint: Any, cls: type) -> None:
    try:
        pydantic.TypeAdapter(hint).validate_python(value)
    except pydantic.ValidationError:
        pass
    except pydantic.PydanticSchemaGenerationError:  # a type pydantic cannot check (a callable alias): trust it
        return
    else:
        return
    shown = getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
    quote = ""
    if isinstance(value, list | dict) and "str" in str(hint):
        written = yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
        quote = f"; YAML read the value as a {type(value).__name__}: quote it, {field}='\"{written}\"'"
    raise ConfigError(f"{field}={value!r}: {cls.__name__} takes it as {shown}, got {type(value).__name__}{quote}")


def make_judge(name: str, **kwargs: Any) -> Judge:
    """The judge called `name` (a registered name or `module:Class`); ConfigError when unknown."""
    return judge_class(name)(**kwargs)
