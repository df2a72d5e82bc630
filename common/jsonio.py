"""Strict JSON for the files people and other programs read (summary.json, metrics.jsonl).

Python's json writes NaN and Infinity as bare literals, which are not JSON: jq, JavaScript and
most parsers refuse the file. A figure that has no value (a mean of nothing, a spread of one
seed) is written as null instead, and allow_nan=False makes any missed case fail loudly here.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def strict(obj: Any) -> Any:
    """`obj` with every non-finite float (numpy's too) replaced by None, containers walked."""
    if isinstance(obj, dict):
        return {k: strict(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [strict(v) for v in obj]
    if isinstance(obj, float) or type(obj).__module__ == "numpy" and hasattr(obj, "item"):
        value = obj.item() if hasattr(obj, "item") else obj
        return None if isinstance(value, float) and not math.isfinite(value) else value
    return obj


def dumps(obj: Any, **kwargs: Any) -> str:
    return json.dumps(strict(obj), allow_nan=False, **kwargs)


def write_json(path: str | Path, obj: Any) -> None:
    Path(path).write_text(dumps(obj, indent=2) + "\n")
