"""Built-in toy corpora (prompt/completion rows) for seed models, tests and the first demo.

A corpus is named by `module:function`; the function takes `n` and `seed` (plus its own
keyword arguments) and returns rows. Workload packages add their own (the ARC DSL corpus,
arithmetic word problems) the same way, without training/ importing them.
"""

from __future__ import annotations

import importlib
import json
import random
from pathlib import Path
from typing import Any

DIGIT_MAP = "7360918254"  # digit d maps to DIGIT_MAP[d]: a fixed, learnable permutation


def digit_map(
    n: int = 2000, seed: int = 0, min_len: int = 3, max_len: int = 6,
    permutation: str = DIGIT_MAP, last_only: bool = True,
) -> list[dict[str, str]]:
    """`map 3 1 4 =>` -> ` 9`: the last digit through a fixed permutation.

    A tiny model learns it in ~150 steps, and held-out strings test that it learned the
    mapping rather than memorised rows. `last_only=False` maps every digit (` 0 3 9`), which
    needs positional alignment and many more steps.
    """
    if sorted(permutation) != list("0123456789"):
        raise ValueError(f"permutation {permutation!r} must contain each digit 0-9 once")
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        digits = [rng.randrange(10) for _ in range(rng.randint(min_len, max_len))]
        target = digits[-1:] if last_only else digits
        rows.append({
            "prompt": "map " + " ".join(map(str, digits)) + " =>",
            "completion": " " + " ".join(permutation[d] for d in target),
        })
    return rows


def named_function(source: str, what: str, expected: str = "'module:function'"):
    """The function a `module:function` string names; errors say which setting was wrong."""
    module_name, sep, func_name = source.partition(":")
    if not sep:
        raise ValueError(f"{what} {source!r} must be {expected}")
    try:
        return getattr(importlib.import_module(module_name), func_name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"{what} {source!r} cannot be loaded: {e}") from e


def load_corpus(source: str, n: int, seed: int, kwargs: dict[str, Any] | None = None) -> list[dict[str, str]]:
    """Rows from `module:function` (called with n, seed and kwargs) or a JSONL file of rows."""
    if source.endswith(".jsonl"):
        path = Path(source)
        if not path.exists():
            raise FileNotFoundError(f"corpus file {path} does not exist")
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return rows[:n] if n else rows
    rows = named_function(source, "corpus", "'module:function' or a .jsonl path")(n=n, seed=seed, **(kwargs or {}))
    bad = next((r for r in rows if not {"prompt", "completion"} <= set(r)), None)
    if bad is not None:
        raise ValueError(f"corpus {source!r} returned a row without prompt/completion: {sorted(bad)}")
    return rows


def number_words(limit: int = 200) -> list[str]:
    """"0" .. "199" as whole tokens (a seed's `words`): a number is then one token, so a small
    model copies an operand in one step and an arithmetic step is a lookup of token pairs,
    instead of aligning digits and carries character by character."""
    return [str(i) for i in range(limit)]
