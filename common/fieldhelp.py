"""`--help` text for a config dataclass: every dotted field with its type, default and comment.

The comments are the ones written beside (or just above) each field in the dataclass source,
as TRL's HfArgumentParser shows each field's `help`; a config declared once documents its
own command line.

    print(describe_fields(SoarConfig))
      experiment: str = 'soar'  Redis namespace; the same name resumes
      tasks.split: str = 'arc1-train'  arc1-train | arc1-eval | ...
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import textwrap
import tokenize
from functools import cache
from typing import Any

from common.config import _is_config_class, _type_name, _unwrap_optional, field_hints

MAX_DEFAULT_CHARS = 60


@cache
def field_comments(cls: type) -> dict[str, str]:
    """Field name -> its comment: the trailing `# ...` on the field's last line, else the
    comment lines right above it."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    lines = source.splitlines()
    found: dict[str, str] = {}
    body = ast.parse(source).body[0]
    for node in getattr(body, "body", []):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        text = comments.get(node.end_lineno or node.lineno, "")
        if not text:  # comment lines right above the field
            above, line = [], node.lineno - 1
            while line >= 1 and lines[line - 1].strip().startswith("#"):
                above.insert(0, comments.get(line, ""))
                line -= 1
            text = " ".join(above)
        found[node.target.id] = text
    return found


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= MAX_DEFAULT_CHARS else text[:MAX_DEFAULT_CHARS - 3] + "..."


def field_rows(cls: type, prefix: str = "", default_obj: Any = None) -> list[tuple[str, str, str, str]]:
    """(dotted name, type, default, comment) for every leaf field, sections expanded in order.
    A section's defaults come from its parent's default (`ModelConfig.seed`'s preset, say)."""
    rows = []
    comments = field_comments(cls)
    hints = field_hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        hint = hints[f.name]
        default = getattr(default_obj, f.name) if default_obj is not None else _default(f)
        if _is_config_class(_unwrap_optional(hint)) and default is not None:
            rows += field_rows(_unwrap_optional(hint), f"{prefix}{f.name}.", default)
            continue
        shown = "required" if default is dataclasses.MISSING else _short(default)
        type_name = _type_name(hint) or str(hint)
        if _unwrap_optional(hint) is not hint:  # Optional[X]
            type_name += " | None"
        rows.append((prefix + f.name, type_name, shown, comments.get(f.name, "")))
    return rows


def describe_fields(cls: type) -> str:
    """The fields as `--help` lines (one per field; long comments wrapped under it)."""
    out = []
    for name, type_name, default, comment in field_rows(cls):
        head = f"  {name}: {type_name} = {default}"
        out.append(head if not comment else f"{head}\n" + textwrap.fill(
            comment, width=100, initial_indent=" " * 6, subsequent_indent=" " * 6))
    return "\n".join(out)
