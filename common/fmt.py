"""Numbers as people read them in log lines: three significant figures, rates in e-notation.

    num(0.6940104166666666) -> "0.694"      num(12.0) -> "12"        num(1234.5) -> "1,234"
    num(5e-05) -> "5e-05"                   lr(5e-05) -> "5.0e-05"   lr(0.0) -> "0"
    metrics({"loss": 0.69314, "learning_rate": 4.2e-05}) -> "loss 0.693, learning_rate 4.2e-05"

Log lines only: summary.json and metrics.jsonl keep full precision (a figure rounded for the eye
must not be rounded again by whoever computes with it). TRL's own log rounds to 4 decimal
places, which prints a learning rate of 5e-5 as 0.0 for a whole run; hence the e-notation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

SIGNIFICANT = 3
# keys whose values are small rates read on a log scale (TRL's and transformers' names)
RATE_KEYS = ("learning_rate", "lr")


def num(x: Any, digits: int = SIGNIFICANT) -> str:
    """`x` to `digits` significant figures; integers (and floats >= 10**digits) whole, with
    thousands separators; very small magnitudes in e-notation. Non-numbers as str()."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    text = f"{x:.{digits}g}"
    if abs(float(text)) >= 10 ** digits:  # 1234.5, or 999.9 rounding up to 1e+03
        return f"{x:,.0f}"
    if "e" in text:  # below 1e-4 Python's g switches to e-notation: keep it, without a padded exponent
        mantissa, exponent = text.split("e")
        return f"{mantissa}e{int(exponent):+03d}".replace("e+", "e")
    return text


def lr(x: float) -> str:
    """A learning rate: e-notation with two significant figures (5.0e-05), 0 as "0"."""
    return "0" if x == 0 else f"{x:.1e}"


def delta(x: float, digits: int = SIGNIFICANT) -> str:
    """A change, signed: +0.012, -3, +0."""
    return ("+" if x >= 0 else "") + num(x, digits)


def metrics(values: Mapping[str, Any]) -> str:
    """A trainer's log dict as one line: `loss 0.693, grad_norm 1.2, learning_rate 5.0e-05`."""
    parts = []
    for key, value in values.items():
        is_rate = key in RATE_KEYS or key.endswith("/learning_rate")
        shown = lr(value) if is_rate and isinstance(value, int | float) else num(value)
        parts.append(f"{key} {shown}")
    return ", ".join(parts)
