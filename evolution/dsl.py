"""A small ARC grid DSL: primitives a small model can compose into `transform(grid)`.

Programs written against it are linear, one primitive per line, which a character-level
model learns far more easily than nested expressions:

    from evolution.dsl import *
    def transform(grid):
        grid = rot90(grid)
        grid = recolor(grid, 1, 2)
        return grid

Runs inside the ARC sandbox, so this module imports only numpy and the standard library.
Every primitive takes a grid (lists, tuples or an array) and returns a new int array;
colour arguments are ints 0..9; 0 is the background.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

__all__ = [
    "rot90", "rot180", "rot270", "flip_h", "flip_v", "transpose", "anti_transpose",
    "mirror_h", "mirror_v", "mirror_both", "symmetrize_h", "symmetrize_v",
    "crop", "largest_object", "smallest_object",
    "upscale2", "upscale3", "downscale2", "tile_1x2", "tile_2x1", "tile_2x2", "tile_3x3",
    "recolor", "swap_colors", "keep_color", "remove_color", "fill_background", "invert",
    "gravity_down", "gravity_up", "gravity_left", "gravity_right",
    "shift_down", "shift_up", "shift_left", "shift_right",
    "fill_enclosed", "draw_border", "outline",
    "left_half", "right_half", "top_half", "bottom_half", "overlay_halves_h", "overlay_halves_v",
    "unique_rows", "unique_cols", "most_common_color",
]


def _a(grid) -> np.ndarray:
    return np.array(grid, dtype=np.int64, ndmin=2)


# --- geometry -----------------------------------------------------------------------------
def rot90(grid):
    """Rotate 90 degrees clockwise."""
    return np.rot90(_a(grid), -1)


def rot180(grid):
    return np.rot90(_a(grid), 2)


def rot270(grid):
    """Rotate 90 degrees counter-clockwise."""
    return np.rot90(_a(grid), 1)


def flip_h(grid):
    """Mirror left <-> right."""
    return _a(grid)[:, ::-1]


def flip_v(grid):
    """Mirror top <-> bottom."""
    return _a(grid)[::-1, :]


def transpose(grid):
    return _a(grid).T


def anti_transpose(grid):
    return np.rot90(_a(grid), 2).T


# --- symmetry -----------------------------------------------------------------------------
def mirror_h(grid):
    """The grid followed by its left-right mirror image (width doubles)."""
    g = _a(grid)
    return np.hstack([g, g[:, ::-1]])


def mirror_v(grid):
    """The grid above its top-bottom mirror image (height doubles)."""
    g = _a(grid)
    return np.vstack([g, g[::-1, :]])


def mirror_both(grid):
    """Four-way kaleidoscope (both sides double)."""
    return mirror_v(mirror_h(grid))


def symmetrize_h(grid):
    """Fill background cells from the left-right mirror image."""
    g = _a(grid)
    return np.where(g == 0, g[:, ::-1], g)


def symmetrize_v(grid):
    g = _a(grid)
    return np.where(g == 0, g[::-1, :], g)


# --- crops and objects --------------------------------------------------------------------
def crop(grid):
    """Crop to the bounding box of the non-background cells."""
    g = _a(grid)
    rows, cols = np.nonzero(g)
    if rows.size == 0:
        return g
    return g[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1]


def _objects(g: np.ndarray) -> list[list[tuple[int, int]]]:
    """4-connected groups of same-coloured non-background cells."""
    seen = np.zeros(g.shape, dtype=bool)
    objects = []
    for r in range(g.shape[0]):
        for c in range(g.shape[1]):
            if g[r, c] == 0 or seen[r, c]:
                continue
            colour, stack, cells = g[r, c], [(r, c)], []
            seen[r, c] = True
            while stack:
                y, x = stack.pop()
                cells.append((y, x))
                for dy, dx in ((1, 0), (-1, 0), (0, 1), (0, -1)):
                    ny, nx = y + dy, x + dx
                    if 0 <= ny < g.shape[0] and 0 <= nx < g.shape[1] and not seen[ny, nx] and g[ny, nx] == colour:
                        seen[ny, nx] = True
                        stack.append((ny, nx))
            objects.append(cells)
    return objects


def _crop_cells(g: np.ndarray, cells: list[tuple[int, int]]) -> np.ndarray:
    ys, xs = zip(*cells, strict=True)
    out = np.zeros((max(ys) - min(ys) + 1, max(xs) - min(xs) + 1), dtype=np.int64)
    for y, x in cells:
        out[y - min(ys), x - min(xs)] = g[y, x]
    return out


def largest_object(grid):
    """The largest single-colour connected object, cropped."""
    g = _a(grid)
    objs = _objects(g)
    return _crop_cells(g, max(objs, key=len)) if objs else g


def smallest_object(grid):
    g = _a(grid)
    objs = _objects(g)
    return _crop_cells(g, min(objs, key=len)) if objs else g


# --- scale and tile -----------------------------------------------------------------------
def upscale2(grid):
    """Each cell becomes a 2x2 block."""
    return np.kron(_a(grid), np.ones((2, 2), dtype=np.int64))


def upscale3(grid):
    return np.kron(_a(grid), np.ones((3, 3), dtype=np.int64))


def downscale2(grid):
    """Keep every other row and column."""
    return _a(grid)[::2, ::2]


def tile_1x2(grid):
    return np.tile(_a(grid), (1, 2))


def tile_2x1(grid):
    return np.tile(_a(grid), (2, 1))


def tile_2x2(grid):
    return np.tile(_a(grid), (2, 2))


def tile_3x3(grid):
    return np.tile(_a(grid), (3, 3))


# --- colours ------------------------------------------------------------------------------
def recolor(grid, a: int, b: int):
    """Every cell of colour a becomes b."""
    g = _a(grid).copy()
    g[g == a] = b
    return g


def swap_colors(grid, a: int, b: int):
    g = _a(grid)
    return np.where(g == a, b, np.where(g == b, a, g))


def keep_color(grid, c: int):
    """Only colour c stays; everything else becomes background."""
    g = _a(grid)
    return np.where(g == c, g, 0)


def remove_color(grid, c: int):
    g = _a(grid)
    return np.where(g == c, 0, g)


def fill_background(grid, c: int):
    g = _a(grid)
    return np.where(g == 0, c, g)


def most_common_color(grid) -> int:
    """The most frequent non-background colour (0 when there is none)."""
    counts = Counter(int(v) for v in _a(grid).ravel() if v != 0)
    return counts.most_common(1)[0][0] if counts else 0


def invert(grid):
    """Background <-> the most common colour."""
    g = _a(grid)
    c = most_common_color(g)
    return np.where(g == 0, c, np.where(g == c, 0, g))


# --- gravity and shifts -------------------------------------------------------------------
def _gravity_cols(g: np.ndarray) -> np.ndarray:
    out = np.zeros_like(g)
    for c in range(g.shape[1]):
        col = g[:, c][g[:, c] != 0]
        if col.size:
            out[-col.size :, c] = col
    return out


def gravity_down(grid):
    """Non-background cells fall to the bottom of their column, keeping their order."""
    return _gravity_cols(_a(grid))


def gravity_up(grid):
    return _gravity_cols(_a(grid)[::-1])[::-1]


def gravity_right(grid):
    return _gravity_cols(_a(grid).T).T


def gravity_left(grid):
    return _gravity_cols(_a(grid)[:, ::-1].T).T[:, ::-1]


def _shift(g: np.ndarray, dy: int, dx: int) -> np.ndarray:
    out = np.zeros_like(g)
    h, w = g.shape
    out[max(dy, 0) : h + min(dy, 0), max(dx, 0) : w + min(dx, 0)] = g[max(-dy, 0) : h - max(dy, 0), max(-dx, 0) : w - max(dx, 0)]
    return out


def shift_down(grid):
    return _shift(_a(grid), 1, 0)


def shift_up(grid):
    return _shift(_a(grid), -1, 0)


def shift_right(grid):
    return _shift(_a(grid), 0, 1)


def shift_left(grid):
    return _shift(_a(grid), 0, -1)


# --- fills and borders --------------------------------------------------------------------
def fill_enclosed(grid, c: int):
    """Background cells not connected to the border (4-neighbourhood) become colour c."""
    g = _a(grid)
    h, w = g.shape
    outside = np.zeros(g.shape, dtype=bool)
    stack = [(y, x) for y in range(h) for x in (0, w - 1)] + [(y, x) for x in range(w) for y in (0, h - 1)]
    while stack:
        y, x = stack.pop()
        if 0 <= y < h and 0 <= x < w and not outside[y, x] and g[y, x] == 0:
            outside[y, x] = True
            stack.extend(((y + 1, x), (y - 1, x), (y, x + 1), (y, x - 1)))
    return np.where((g == 0) & ~outside, c, g)


def draw_border(grid, c: int):
    """Colour the outermost ring of cells c."""
    g = _a(grid).copy()
    g[0, :] = g[-1, :] = c
    g[:, 0] = g[:, -1] = c
    return g


def outline(grid, c: int):
    """Background cells 4-adjacent to a non-background cell become colour c."""
    g = _a(grid)
    mask = g != 0
    near = np.zeros_like(mask)
    near[1:, :] |= mask[:-1, :]
    near[:-1, :] |= mask[1:, :]
    near[:, 1:] |= mask[:, :-1]
    near[:, :-1] |= mask[:, 1:]
    return np.where(~mask & near, c, g)


# --- halves -------------------------------------------------------------------------------
def left_half(grid):
    g = _a(grid)
    return g[:, : max(1, g.shape[1] // 2)]


def right_half(grid):
    g = _a(grid)
    return g[:, g.shape[1] - max(1, g.shape[1] // 2) :]


def top_half(grid):
    g = _a(grid)
    return g[: max(1, g.shape[0] // 2), :]


def bottom_half(grid):
    g = _a(grid)
    return g[g.shape[0] - max(1, g.shape[0] // 2) :, :]


def overlay_halves_h(grid):
    """Left half over right half (a divider column in the middle is dropped): cells that are
    background in the left half show the right half."""
    g = _a(grid)
    half = g.shape[1] // 2
    left, right = g[:, :half], g[:, g.shape[1] - half :]
    return np.where(left == 0, right, left) if half else g


def overlay_halves_v(grid):
    g = _a(grid)
    half = g.shape[0] // 2
    top, bottom = g[:half, :], g[g.shape[0] - half :, :]
    return np.where(top == 0, bottom, top) if half else g


# --- rows and columns ---------------------------------------------------------------------
def unique_rows(grid):
    """Collapse runs of identical consecutive rows into one."""
    g = _a(grid)
    keep = [0] + [i for i in range(1, g.shape[0]) if not np.array_equal(g[i], g[i - 1])]
    return g[keep]


def unique_cols(grid):
    return unique_rows(_a(grid).T).T
