"""Dependencies point one way: ray_jobs -> workloads and training -> verifiers -> store, common.

A lower layer never imports a higher one, and the workload packages (evolution, search,
thinking) never import each other: what two of them share belongs a layer below. The test
reads every import statement (at any depth, lazy ones too) with `ast`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS: dict[str, int] = {
    "common": 0,
    "store": 1,
    "verifiers": 2,
    "training": 3,
    "evolution": 4,
    "search": 4,
    "thinking": 4,
    "ray_jobs": 5,
    "benchmarks": 6,
}
# The one sanctioned sideways edge: SOAR's loop drives samplers through search's Ray pool.
SIDEWAYS = {("evolution", "search.pool"), ("thinking", "search.pool")}


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every absolute import in a file, lazy ones included."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
    return out


def wrong_way(root: Path = ROOT) -> list[str]:
    found = []
    for package, rank in LAYERS.items():
        for path in sorted((root / package).rglob("*.py")):
            for line, module in imports(path):
                target = module.split(".")[0]
                if target not in LAYERS or target == package:
                    continue
                sideways = LAYERS[target] == rank and not any(
                    package == p and (module == m or module.startswith(m + ".")) for p, m in SIDEWAYS)
                if LAYERS[target] > rank or sideways:
                    found.append(f"{path.relative_to(root)}:{line} imports {module} ({package} -> {target})")
    return found


def test_no_import_points_the_wrong_way():
    assert wrong_way() == []


def test_a_wrong_way_import_is_caught(tmp_path):
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "bad.py").write_text("def f():\n    from evolution.dsl import flip\n")
    (tmp_path / "evolution").mkdir()
    (tmp_path / "evolution" / "side.py").write_text("from search.curves import x\nfrom search.pool import SamplerPool\n")
    assert wrong_way(tmp_path) == [
        "store/bad.py:2 imports evolution.dsl (store -> evolution)",
        "evolution/side.py:1 imports search.curves (evolution -> search)",
    ]
