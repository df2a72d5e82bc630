"""Typical model-written ARC programs (hand-written in that style), for the sandbox corpus test.

Each must give, input by input, what bare ``exec`` gives: the same grid or the same
exception type. They use numpy (including functions that import submodules lazily),
plain Python, collections and scipy.ndimage, as programs models write for ARC do.
"""

PROGRAMS: dict[str, str] = {
    "np_rot90": """
import numpy as np
def transform(grid):
    return np.rot90(np.array(grid)).tolist()
""",
    "np_flip_concat": """
import numpy as np
def transform(grid):
    a = np.array(grid)
    return np.concatenate([a, np.fliplr(a)], axis=1)
""",
    "np_kron_upscale": """
import numpy as np
def transform(grid):
    a = np.array(grid)
    return np.kron(a, np.ones((2, 2), dtype=int))[:30, :30]
""",
    "np_kron_self": """
import numpy as np
def transform(grid):
    a = np.array(grid)
    if a.shape[0] * a.shape[0] > 30 or a.shape[1] * a.shape[1] > 30:
        return a
    return np.kron(a != 0, a)
""",
    "np_percentile_fill": """
import numpy as np
def transform(grid):
    a = np.array(grid)
    m = int(np.percentile(a, 50))
    return np.where(a == 0, m, a)
""",
    "np_ma_fill": """
import numpy as np
def transform(grid):
    a = np.ma.masked_equal(np.array(grid), 0)
    return a.filled(int(a.max()) if a.count() else 0)
""",
    "np_unique_counts": """
import numpy as np
def transform(grid):
    vals, counts = np.unique(np.array(grid), return_counts=True)
    return [[int(v) for v in vals[np.argsort(-counts, kind="stable")]]]
""",
    "np_bbox_crop": """
import numpy as np
def transform(grid):
    a = np.array(grid)
    ys, xs = np.nonzero(a)
    if len(ys) == 0:
        return a
    return a[ys.min():ys.max() + 1, xs.min():xs.max() + 1]
""",
    "np_tile_mirror": """
import numpy as np
def transform(grid):
    a = np.array(grid)
    b = np.block([[a, np.fliplr(a)], [np.flipud(a), np.rot90(a, 2)]])
    return b[:30, :30]
""",
    "np_polyfit_identity": """
import numpy as np
def transform(grid):
    a = np.array(grid)
    p = np.polynomial.Polynomial([0, 1])
    return p(a).astype(int)
""",
    "np_median_rows": """
import numpy as np
def transform(grid):
    a = np.array(grid)
    return np.median(a, axis=1, keepdims=True).astype(int)
""",
    "np_pad_border": """
import numpy as np
def transform(grid):
    a = np.array(grid)[:28, :28]
    return np.pad(a, 1, constant_values=8)
""",
    "np_fft_roundtrip": """
import numpy as np
def transform(grid):
    a = np.array(grid, dtype=float)
    return np.rint(np.fft.ifft2(np.fft.fft2(a)).real).astype(int)
""",
    "np_linalg_rank_color": """
import numpy as np
def transform(grid):
    a = np.array(grid)
    return [[int(np.linalg.matrix_rank(a)) % 10]]
""",
    "np_raises_shape": """
import numpy as np
def transform(grid):
    a = np.array(grid)
    return (a + np.ones((a.shape[0] + 1, 3), int)).tolist()
""",
    "py_transpose": """
def transform(grid):
    return [list(r) for r in zip(*grid)]
""",
    "py_gravity": """
def transform(grid):
    h, w = len(grid), len(grid[0])
    out = [[0] * w for _ in range(h)]
    for c in range(w):
        col = [grid[r][c] for r in range(h) if grid[r][c] != 0]
        for i, v in enumerate(reversed(col)):
            out[h - 1 - i][c] = v
    return out
""",
    "py_recursive_fill": """
import sys
sys.setrecursionlimit(10000)
def transform(grid):
    g = [row[:] for row in grid]
    h, w = len(g), len(g[0])
    def fill(r, c):
        if 0 <= r < h and 0 <= c < w and g[r][c] == 0:
            g[r][c] = 4
            fill(r + 1, c); fill(r - 1, c); fill(r, c + 1); fill(r, c - 1)
    for r in range(h):
        for c in (0, w - 1):
            fill(r, c)
    for c in range(w):
        for r in (0, h - 1):
            fill(r, c)
    return [[3 if v == 0 else (0 if v == 4 else v) for v in row] for row in g]
""",
    "py_index_error": """
def transform(grid):
    return [[grid[len(grid)][0]]]
""",
    "py_wrong_type": """
def transform(grid):
    return "not a grid"
""",
    "py_itertools_product": """
from itertools import product
def transform(grid):
    h, w = len(grid), len(grid[0])
    out = [row[:] for row in grid]
    for r, c in product(range(h), range(w)):
        if grid[r][c] == 0 and 0 < r < h - 1 and grid[r - 1][c] == grid[r + 1][c] != 0:
            out[r][c] = grid[r - 1][c]
    return out
""",
    "coll_counter_recolor": """
from collections import Counter
def transform(grid):
    counts = Counter(v for row in grid for v in row if v != 0)
    if not counts:
        return grid
    top = counts.most_common(1)[0][0]
    return [[top if v != 0 else 0 for v in row] for row in grid]
""",
    "coll_bfs_components": """
from collections import deque, defaultdict
def transform(grid):
    h, w = len(grid), len(grid[0])
    seen = set()
    sizes = defaultdict(int)
    for r in range(h):
        for c in range(w):
            if grid[r][c] == 0 or (r, c) in seen:
                continue
            q = deque([(r, c)]); seen.add((r, c)); n = 0
            while q:
                y, x = q.popleft(); n += 1
                for ny, nx in ((y + 1, x), (y - 1, x), (y, x + 1), (y, x - 1)):
                    if 0 <= ny < h and 0 <= nx < w and (ny, nx) not in seen and grid[ny][nx] != 0:
                        seen.add((ny, nx)); q.append((ny, nx))
            sizes[n] += 1
    return [[min(sizes[k], 9) for k in sorted(sizes)] or [0]]
""",
    "coll_namedtuple_objects": """
from collections import namedtuple
Cell = namedtuple("Cell", "r c v")
def transform(grid):
    cells = [Cell(r, c, v) for r, row in enumerate(grid) for c, v in enumerate(row) if v]
    cells.sort(key=lambda x: (x.v, x.r, x.c))
    return [[x.v for x in cells[:30]] or [0]]
""",
    "ndi_label_sizes": """
import numpy as np
from scipy import ndimage
def transform(grid):
    a = np.array(grid)
    labels, n = ndimage.label(a != 0)
    out = np.zeros_like(a)
    for i in range(1, n + 1):
        out[labels == i] = min(int((labels == i).sum()), 9)
    return out
""",
    "ndi_fill_holes": """
import numpy as np
import scipy.ndimage as ndi
def transform(grid):
    a = np.array(grid)
    filled = ndi.binary_fill_holes(a != 0)
    return np.where(filled & (a == 0), 4, a)
""",
    "ndi_find_objects_crop": """
import numpy as np
from scipy.ndimage import label, find_objects
def transform(grid):
    a = np.array(grid)
    lab, n = label(a != 0)
    if n == 0:
        return a
    sl = max(find_objects(lab), key=lambda s: (s[0].stop - s[0].start) * (s[1].stop - s[1].start))
    return a[sl]
""",
    "ndi_dilate": """
import numpy as np
from scipy import ndimage
def transform(grid):
    a = np.array(grid)
    d = ndimage.binary_dilation(a != 0, structure=np.ones((3, 3)))
    return np.where(d & (a == 0), 2, a)
""",
    "ndi_center_of_mass": """
import numpy as np
from scipy import ndimage
def transform(grid):
    a = np.array(grid)
    if not a.any():
        return a
    r, c = ndimage.center_of_mass(a != 0)
    out = a.copy()
    out[int(round(r)), int(round(c))] = 5
    return out
""",
    "ndi_shift_rotate": """
import numpy as np
from scipy import ndimage
def transform(grid):
    a = np.array(grid)
    return ndimage.shift(a, (1, 0), order=0, mode="wrap")
""",
    "ndi_generic_filter_max": """
import numpy as np
from scipy import ndimage
def transform(grid):
    a = np.array(grid)
    return ndimage.maximum_filter(a, size=3)
""",
}
