"""Grids as text, in the two forms SOAR prompts use.

- "numpy": rows printed like a numpy array, with the shape, as strong code models are
  prompted (`[[0 1]\n [2 3]]`).
- "digits": one line of digits per row, for small character-level models: one token per
  cell, so the model can align cells across lines.
"""

from __future__ import annotations

from typing import Literal

from verifiers.arc.grids import Grid

Style = Literal["numpy", "digits"]


def shape(grid: Grid) -> str:
    return f"{len(grid)}x{len(grid[0])}"


def grid_text(grid: Grid, style: Style) -> str:
    if style == "digits":
        return "\n".join("".join(map(str, row)) for row in grid)
    if style == "numpy":
        rows = [" ".join(map(str, row)) for row in grid]
        return "[" + "\n ".join(f"[{r}]" for r in rows) + "]"
    raise ValueError(f"grid style {style!r} is unknown; use 'numpy' or 'digits'")


def colour_set(grid: Grid) -> str:
    return "".join(str(c) for c in sorted({v for row in grid for v in row}))
