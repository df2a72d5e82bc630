"""The seed corpus: hindsight from the first step.

A random DSL program run on the inputs of a real ARC training task defines a new task
whose answer is, by construction, that program. Rows are prompt/completion pairs in the
compact prompt style, so a seed model learns the format, the DSL and a first sense of
which grid changes which primitives make. A share of rows are refinement rows: a wrong
parent program with its feedback -> the right program, so one model learns both jobs.

    python -m training.seed --preset tiny --corpus evolution.seed_corpus:seed_corpus --n 20000 \
        --words evolution.seed_corpus:program_words
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from evolution.programs import (
    COLOUR_ARGS,
    PRIMITIVES,
    Program,
    Step,
    colours,
    random_program,
    render,
    run,
)
from evolution.prompts import (
    CODE_PREFIX,
    completion_from_program,
    refinement_prompt,
    sampling_prompt,
)
from evolution.records import Candidate
from evolution.tasks import load_split, select
from store.codehash import code_hash
from verifiers.arc.grids import ArcTask, Example, Grid


def program_words() -> list[str]:
    """Whole tokens for a seed tokenizer: a program line up to its colour arguments is one
    token, so `    grid = rot90(grid)` is one token and `    grid = recolor(grid, 3, 8)` five:
    a name cannot be misspelt and a primitive cannot get the wrong number of arguments
    (beyond the digits)."""
    lines = [Step(name).render() + ("\n" if COLOUR_ARGS[name] == 0 else "") for name in PRIMITIVES]
    return [CODE_PREFIX, *(line if line.endswith("\n") else line[:-1] + ", " for line in lines),
            ", ", ")\n", "    return grid\n"]


def relabel(inputs: Sequence[Grid], program: Program, rng: random.Random, task_id: str) -> ArcTask | None:
    """The task `program` defines on `inputs` (shuffled; last one is the test), or None when
    the program fails or is degenerate there (identity everywhere, or one output for all)."""
    outputs = [run(program, g) for g in inputs]
    if any(o is None for o in outputs):
        return None
    if all(o == i for o, i in zip(outputs, inputs, strict=True)) or len(set(outputs)) == 1:
        return None
    pairs = list(zip(inputs, outputs, strict=True))
    rng.shuffle(pairs)
    examples = tuple(Example(i, o) for i, o in pairs)
    return ArcTask(task_id, examples[:-1], examples[-1:])


def parent_candidate(task: ArcTask, program: Program) -> Candidate | None:
    """How a (wrong) program does on the task, as the refinement prompt shows it."""
    train_out = [run(program, ex.input) for ex in task.train]
    test_out = [run(program, ex.input) for ex in task.test]
    correct = tuple(o == ex.output for o, ex in zip(train_out, task.train, strict=True))
    if all(correct):
        return None
    code = render(program)
    return Candidate(task.id, code, code_hash(code), train_correct=correct,
                     train_outputs=tuple(train_out), test_outputs=tuple(test_out),
                     all_ok=all(o is not None for o in train_out + test_out))


def source_tasks(split: str = "arc1-train", max_grid: int = 10, exclude_tasks: Sequence[str] = (),
                 max_chars: int = 1900) -> list[ArcTask]:
    """The tasks whose inputs seed_corpus may draw on: `split`'s tasks with grids <= `max_grid`,
    less `exclude_tasks`, less those whose own prompt is over `max_chars` (it nearly never yields
    a row that fits). A model taught on the corpus has seen these tasks' inputs and no others."""
    excluded = set(exclude_tasks)
    sources = [t for tid, t in select(load_split(split), max_grid=max_grid).items()
               if tid not in excluded and len(sampling_prompt(t)) <= max_chars]
    if not sources:
        raise ValueError(f"no source tasks in {split} with grids <= {max_grid} and prompts <= {max_chars} "
                         "characters after exclusions")
    return sources


def seed_corpus(n: int = 20000, seed: int = 0, max_grid: int = 10, max_steps: int = 2,
                refine_frac: float = 0.2, exclude_tasks: Sequence[str] = (),
                split: str = "arc1-train", max_chars: int = 1900) -> list[dict[str, str]]:
    """`n` prompt/completion rows from random DSL programs on real ARC inputs.

    `exclude_tasks` keeps the inputs of evaluation tasks (demo and held-out) out of training;
    rows longer than `max_chars` (about tokens, for the byte-level seed tokenizer) are skipped
    so they fit the seed models' context with room to spare.
    """
    rng = random.Random(seed)
    sources = source_tasks(split, max_grid, exclude_tasks, max_chars)
    rows: list[dict[str, str]] = []
    attempts = 0
    while len(rows) < n:
        attempts += 1
        if attempts > 50 * n:
            raise RuntimeError(f"could only build {len(rows)} of {n} rows: programs keep failing")
        src = rng.choice(sources)
        inputs = [ex.input for ex in src.train + src.test]
        program = random_program(rng, colours(inputs), colours(inputs), max_steps)
        task = relabel(inputs, program, rng, f"{src.id}-h{len(rows)}")
        if task is None:
            continue
        if rng.random() < refine_frac:
            wrong = random_program(rng, colours(inputs), colours(inputs), max_steps)
            parent = parent_candidate(task, wrong)
            if parent is not None:
                _append(rows, refinement_prompt(task, parent), render(program), max_chars)
                continue
        _append(rows, sampling_prompt(task), render(program), max_chars)
    return rows


def _append(rows: list[dict[str, str]], prompt: str, code: str, max_chars: int) -> None:
    completion = completion_from_program(code, "compact")
    if len(prompt) + len(completion) <= max_chars:
        rows.append({"prompt": prompt, "completion": completion})
