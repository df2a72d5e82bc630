"""Task sources a user could get wrong, for the dry-run refusals (tests/test_soar_tasks.py)."""

from __future__ import annotations

NOT_A_FUNCTION = {"t": {"train": [], "test": []}}


def ragged() -> dict:
    """Row 1 is shorter than row 0."""
    return {"bad": {"train": [{"input": [[1, 0], [0]], "output": [[2, 0], [0, 2]]}],
                    "test": [{"input": [[1, 1], [0, 1]]}]}}


def colour_ten() -> dict:
    return {"bad": {"train": [{"input": [[1, 10]], "output": [[2, 0]]}], "test": [{"input": [[1, 1]]}]}}


def a_list() -> list:
    return [{"train": [], "test": []}]


def one_task() -> dict:
    return {"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[1]]}]}


def needs_a_path(path: str) -> dict:
    return {}


def fails() -> dict:
    raise FileNotFoundError("tasks.db")
