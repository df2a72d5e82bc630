"""Dependencies point one way: benchmarks, drills -> ray_jobs -> jobs -> workloads -> search -> training ->
verifiers -> store, common.

A lower layer never imports a higher one, and the workload packages (evolution, scaling,
thinking) never import each other: what two of them share belongs a layer below (search/
holds what every workload shares: engines, the sampler pool, strategies, serving). jobs/ (the
runner every job file uses) sits between: the job files import it, and it imports no workload. The test
reads every import statement (at any depth, lazy ones too) with `ast`. Within a package, no
two modules import each other, however indirectly (a circle works only by the order of
imports, and a lazy import that hides one breaks when it is moved to the top).
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
    "search": 4,
    "evolution": 5,
    "scaling": 5,
    "thinking": 5,
    "jobs": 6,
    "ray_jobs": 7,
    "benchmarks": 8,
    "drills": 8,
}
SIDEWAYS: set[tuple[str, str]] = set()  # (package, module) edges between equal ranks that are sanctioned: none


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


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the ratchet modules it imports. `from pkg import sub` is an edge to pkg.sub
    when that is a module; a package's own __init__, which Python runs before any of its
    submodules, is not an edge (it re-exports, and importing a submodule always runs it)."""
    paths = {module_name(p, root): p for package in LAYERS for p in sorted((root / package).rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in paths else node.module
                           for a in node.names]
            else:
                continue
            deps |= {t for t in targets if t in paths and t != name and not name.startswith(t + ".")}
        graph[name] = deps
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_modules_import_each_other():
    assert circles(import_graph()) == []


def test_a_circle_of_imports_is_caught(tmp_path):
    # the shape verifiers/judges had: the interface's factory imported each judge, lazily,
    # and each judge imported the interface
    judges = tmp_path / "verifiers" / "judges"
    judges.mkdir(parents=True)
    (tmp_path / "verifiers" / "__init__.py").write_text("")
    (judges / "__init__.py").write_text("from verifiers.judges.base import make\n")
    (judges / "base.py").write_text("def make():\n    from verifiers.judges.exact import Exact\n    return Exact()\n")
    (judges / "exact.py").write_text("from verifiers.judges.base import make\nclass Exact: ...\n")
    (judges / "registry.py").write_text("from verifiers.judges import exact\n")
    assert circles(import_graph(tmp_path)) == [["verifiers.judges.base", "verifiers.judges.exact"]]


def test_no_import_points_the_wrong_way():
    assert wrong_way() == []


def test_a_wrong_way_import_is_caught(tmp_path):
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "bad.py").write_text("def f():\n    from evolution.dsl import flip\n")
    (tmp_path / "evolution").mkdir()
    (tmp_path / "evolution" / "side.py").write_text("from scaling.curves import x\nfrom search.pool import SamplerPool\n")
    (tmp_path / "search").mkdir()
    (tmp_path / "search" / "up.py").write_text("import scaling.experiment\n")
    (tmp_path / "thinking").mkdir()
    (tmp_path / "thinking" / "up.py").write_text("from jobs.runner import JobSpec\n")
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "up.py").write_text("from ray_jobs.soar import JOB\n")
    (tmp_path / "ray_jobs").mkdir()
    (tmp_path / "ray_jobs" / "up.py").write_text("from drills.secret_scan import api_key_check\n")
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "side.py").write_text("import drills.chaos\n")
    assert wrong_way(tmp_path) == [
        "store/bad.py:2 imports evolution.dsl (store -> evolution)",
        "search/up.py:1 imports scaling.experiment (search -> scaling)",  # up into a workload package
        "evolution/side.py:1 imports scaling.curves (evolution -> scaling)",  # sideways between workloads
        "thinking/up.py:1 imports jobs.runner (thinking -> jobs)",  # a workload never needs the runner
        "jobs/up.py:1 imports ray_jobs.soar (jobs -> ray_jobs)",  # the runner knows no job file
        "ray_jobs/up.py:1 imports drills.secret_scan (ray_jobs -> drills)",  # a job never needs a drill
        "benchmarks/side.py:1 imports drills.chaos (benchmarks -> drills)",
    ]


def test_every_package_logs_to_a_runs_log():
    """A package missing from RATCHET_PACKAGES loses its DEBUG lines from runs/<experiment>/run.log."""
    from common.logs import RATCHET_PACKAGES

    assert set(LAYERS) - {"benchmarks", "drills"} <= set(RATCHET_PACKAGES)  # neither runs as a job
