"""DSL programs as data: sample them, render them as code, run them (trusted, in-process).

These are *our* programs (DSL compositions), used to build the seed corpus and the
random-program prior; model-written programs only ever run in the ARC sandbox.
"""

from __future__ import annotations

import inspect
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from evolution import dsl
from verifiers.arc.grids import Grid, GridError, validate_grid

PRELUDE = "from evolution.dsl import *"
COLOUR_ARGS = {name: len(inspect.signature(getattr(dsl, name)).parameters) - 1 for name in dsl.__all__}
PRIMITIVES = tuple(n for n in dsl.__all__ if n != "most_common_color")  # grid -> grid only


@dataclass(frozen=True)
class Step:
    name: str
    args: tuple[int, ...] = ()

    def render(self) -> str:
        args = "".join(f", {a}" for a in self.args)
        return f"    grid = {self.name}(grid{args})"


Program = tuple[Step, ...]


def render(program: Program) -> str:
    """Linear code, one primitive per line: the form the seed models learn to write."""
    lines = [PRELUDE, "def transform(grid):", *(s.render() for s in program), "    return grid", ""]
    return "\n".join(lines)


_CALL = re.compile(r"grid = (\w+)\(")


def called_primitives(code: str) -> frozenset[str]:
    """The DSL primitives a program's lines call (`grid = name(grid, ...)`); empty for code that
    calls none, such as a numpy-style program."""
    return frozenset(name for name in _CALL.findall(code) if name in PRIMITIVES)


def body_regex(max_steps: int = 4, colours: Sequence[int] = range(10)) -> str:
    """The grammar of a program body as `render` writes it (what compact prompts' completions
    are): 1..max_steps primitive lines, each with its arity of colour arguments, then the return.
    Sampling under it (SamplingParams.regex) makes every program parse with the right arity;
    `colours` (a task's colours, as the random prior draws them) limits the arguments."""

    if not colours or any(not 0 <= c <= 9 for c in colours):
        raise ValueError(f"colours {list(colours)} must be a non-empty set of ARC colours 0..9")
    digit = "[" + "".join(str(c) for c in sorted(set(colours))) + "]"

    by_arity: dict[int, list[str]] = {}
    for name in PRIMITIVES:
        by_arity.setdefault(COLOUR_ARGS[name], []).append(re.escape(name))
    lines = [f"    grid = (?:{'|'.join(names)})\\(grid{(', ' + digit) * n}\\)\n" for n, names in sorted(by_arity.items())]
    return f"(?:{'|'.join(lines)}){{1,{max_steps}}}    return grid\n"


def run(program: Program, grid: Grid) -> Grid | None:
    """The program's output on grid, or None when it fails or breaks ARC's grid rules."""
    out = np.array(grid, dtype=np.int64)
    try:
        for step in program:
            out = getattr(dsl, step.name)(out, *step.args)
        return validate_grid(np.asarray(out).tolist())
    except (GridError, ValueError, IndexError, TypeError):
        return None


def steps_for(colours_in: Sequence[int], colours_out: Sequence[int]) -> list[Step]:
    """Every single step, with colour arguments drawn from the colours the task shows."""
    steps: list[Step] = []
    cin = sorted(set(colours_in) - {0}) or [1]
    cout = sorted(set(colours_out) | set(colours_in))
    for name in PRIMITIVES:
        n = COLOUR_ARGS[name]
        if n == 0:
            steps.append(Step(name))
        elif n == 1:
            steps.extend(Step(name, (c,)) for c in sorted(set(cin) | set(cout) - {0}))
        else:
            steps.extend(Step(name, (a, b)) for a in cin for b in cout if a != b)
    return steps


def random_program(rng: random.Random, colours_in: Sequence[int], colours_out: Sequence[int],
                   max_steps: int = 2) -> Program:
    """A program from the DSL's own prior: 1..max_steps uniformly random steps."""
    pool = steps_for(colours_in, colours_out)
    return tuple(rng.choice(pool) for _ in range(rng.randint(1, max_steps)))


def colours(grids: Sequence[Grid]) -> list[int]:
    return sorted({v for g in grids for row in g for v in row})
