"""Turning what a program's transform() returned, or raised, into a result line.

Runs in the child, on hostile objects (stdlib + numpy; imported by zygote.py, which runs
as a script beside it). The parent decodes these lines strictly (sandbox.decode_run).
"""

from __future__ import annotations

import json

import numpy as _np


class ForbiddenImport(ImportError):
    pass


def _encode_cell(v: object) -> int:
    t = type(v)
    if t is int or isinstance(v, _np.integer):
        return int(v)
    if (t is float or isinstance(v, _np.floating)) and float(v).is_integer():
        return int(v)  # np.zeros() habit: integral floats are accepted as ints
    raise TypeError(f"cell of type {t.__name__}")


def encode_output(out: object) -> str:
    """A transform() result -> JSON line. Runs in the child, on a hostile object."""
    if type(out) is _np.ndarray:
        if out.ndim != 2 or out.dtype.kind not in "iuf":
            return _line("invalid_output", "InvalidOutput",
                         f"array of ndim {out.ndim} and dtype {out.dtype}, expected 2-D ints")
        rows = out.tolist()
    elif type(out) is list or type(out) is tuple:
        rows = out
    else:
        return _line("invalid_output", "InvalidOutput",
                     f"returned {type(out).__name__}, expected a list of lists or a 2-D array")
    if not 1 <= len(rows) <= 30:
        return _line("invalid_output", "InvalidOutput", f"{len(rows)} rows, ARC allows 1..30")
    text = []
    width = -1
    for row in rows:
        if type(row) is _np.ndarray:
            row = row.tolist()
        if type(row) is not list and type(row) is not tuple:
            return _line("invalid_output", "InvalidOutput", f"row of type {type(row).__name__}")
        if width < 0:
            width = len(row)
        if len(row) != width or not 1 <= width <= 30:
            return _line("invalid_output", "InvalidOutput",
                         f"ragged or out-of-range width {len(row)} (ARC allows 1..30, rectangular)")
        try:
            cells = [_encode_cell(v) for v in row]
        except TypeError as e:
            return _line("invalid_output", "InvalidOutput", str(e))
        if min(cells) < 0 or max(cells) > 9:
            return _line("invalid_output", "InvalidOutput", "cell outside 0..9")
        text.append("".join([_DIGIT[c] for c in cells]))
    return _dumps(["ok", text]) + "\n"


_DIGIT = "0123456789"


def _line(status: str, etype: str, message: str) -> str:
    return _dumps([status, etype, message[:200]]) + "\n"


def failure(e: BaseException) -> str:
    try:
        etype = type(e).__name__
        message = str(e)
    except BaseException:  # a hostile __str__; the type name is our own lookup
        etype, message = "Exception", "(unprintable)"
    etype = etype if type(etype) is str else "Exception"
    message = message if type(message) is str else ""
    if isinstance(e, MemoryError):
        return _line("memory", etype, message or "out of memory")
    if isinstance(e, ForbiddenImport | PermissionError):
        return _line("forbidden", etype, message)
    return _line("error", etype, message)


_dumps = json.dumps
