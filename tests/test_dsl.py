"""The ARC DSL, DSL programs, and that they run the same inside the sandbox as in-process."""

from __future__ import annotations

import random

import numpy as np
import pytest

from evolution import dsl
from evolution.programs import Step, body_regex, random_program, render, run, steps_for
from evolution.prompts import completion_from_program
from evolution.tasks import load_split, max_side, select
from verifiers.arc import ArcExecutor

G = [[0, 1, 0], [2, 0, 0], [0, 0, 3]]


@pytest.mark.parametrize(
    "name, args, expected",
    [
        ("rot90", (), [[0, 2, 0], [0, 0, 1], [3, 0, 0]]),
        ("flip_h", (), [[0, 1, 0], [0, 0, 2], [3, 0, 0]]),
        ("flip_v", (), [[0, 0, 3], [2, 0, 0], [0, 1, 0]]),
        ("transpose", (), [[0, 2, 0], [1, 0, 0], [0, 0, 3]]),
        ("gravity_down", (), [[0, 0, 0], [0, 0, 0], [2, 1, 3]]),
        ("gravity_left", (), [[1, 0, 0], [2, 0, 0], [3, 0, 0]]),
        ("recolor", (1, 5), [[0, 5, 0], [2, 0, 0], [0, 0, 3]]),
        ("keep_color", (2,), [[0, 0, 0], [2, 0, 0], [0, 0, 0]]),
        ("shift_right", (), [[0, 0, 1], [0, 2, 0], [0, 0, 0]]),
        ("crop", (), G),
        ("downscale2", (), [[0, 0], [0, 3]]),
    ],
)
def test_primitives(name, args, expected):
    assert getattr(dsl, name)(G, *args).tolist() == expected


def test_fill_enclosed_and_objects():
    ring = [[1, 1, 1, 0], [1, 0, 1, 0], [1, 1, 1, 0], [0, 0, 0, 2]]
    assert dsl.fill_enclosed(ring, 4).tolist()[1] == [1, 4, 1, 0]
    assert dsl.largest_object(ring).shape == (3, 3)
    assert dsl.smallest_object(ring).tolist() == [[2]]
    assert dsl.mirror_h([[1, 2]]).tolist() == [[1, 2, 2, 1]]
    assert dsl.tile_2x2([[7]]).tolist() == [[7, 7], [7, 7]]


def test_every_primitive_returns_an_int_grid_on_real_inputs():
    task = load_split("arc1-train")["6150a2bd"]
    for step in steps_for([0, 3, 5, 7, 8], [0, 1]):
        out = getattr(dsl, step.name)(task.train[0].input, *step.args)
        assert isinstance(out, np.ndarray) and out.ndim == 2 and out.dtype.kind == "i", step


def test_random_programs_render_to_code_that_the_sandbox_runs_identically():
    """A DSL program computes the same grids in the sandbox (importing evolution.dsl) as here."""
    tasks = select(load_split("arc1-train"), max_grid=8, limit=5)
    rng = random.Random(0)
    with ArcExecutor(workers=1, allowed_modules=("evolution.dsl",)) as ex:
        for task in tasks.values():
            programs = [random_program(rng, [0, 1, 2, 3], [0, 1, 2, 3], max_steps=2) for _ in range(6)]
            results = ex.execute_many(task, [render(p) for p in programs])
            for program, result in zip(programs, results, strict=True):
                here = [run(program, g) for g in task.inputs]
                there = [r.output for r in result.train + result.test]
                assert here == there, render(program)


def test_run_returns_none_on_invalid_grids():
    assert run((Step("upscale3"), Step("upscale3"), Step("upscale3")), ((1, 2), (3, 4))) is None  # 54x54 > 30


def test_task_selection_by_size_and_ids():
    tasks = load_split("arc1-train")
    assert len(tasks) == 400
    small = select(tasks, max_grid=10)
    assert small and all(max_side(t) <= 10 for t in small.values())
    assert list(select(tasks, ids=["6150a2bd", "68b16354"])) == ["6150a2bd", "68b16354"]
    with pytest.raises(ValueError, match="not found"):
        select(tasks, ids=["nope"])
    with pytest.raises(ValueError, match="no such file"):
        load_split("missing-split")


def test_body_regex_accepts_every_rendered_program_and_rejects_wrong_arity_and_colours():
    import regex

    rng = random.Random(0)
    pattern = body_regex(max_steps=2, colours=[0, 3, 5])
    for _ in range(300):
        code = render(random_program(rng, [3, 5], [0, 3], 2))
        assert regex.fullmatch(pattern, completion_from_program(code, "compact")), code
    for bad in ("    grid = rot90(grid, 3)\n    return grid\n",  # rot90 takes no colour
                "    grid = recolor(grid, 3)\n    return grid\n",  # recolor takes two
                "    grid = recolor(grid, 3, 7)\n    return grid\n",  # 7 is not a task colour
                "    grid = rotate(grid)\n    return grid\n",  # not a primitive
                "    return grid\n",  # no step
                "    grid = rot90(grid)\n" * 3 + "    return grid\n"):  # over max_steps
        assert not regex.fullmatch(pattern, bad), bad
    with pytest.raises(ValueError, match="ARC colours"):
        body_regex(colours=[12])


def test_primitive_overlap_names_the_heldout_tasks_the_searched_tasks_primitives_can_solve():
    from evolution.dsl_coverage import primitive_overlap

    split = load_split("arc1-train")
    searched = select(split, ids=["6d0aefbc", "3c9b0459"])  # mirror_h; rot180
    heldout = select(split, ids=["c9e6f938", "ed36ccf7"])  # mirror_h; rot270
    out = primitive_overlap(searched, heldout)
    assert out["searched_primitives"] == ["mirror_h", "rot180"]
    assert out["covered"] == ["c9e6f938"] and out["uncovered"] == ["ed36ccf7"]
    assert out["heldout_only"] == ["rot270"]
    assert out["tasks"]["ed36ccf7"] == ["rot270"]
