"""SOAR prompts and the seed corpus: formats, no answer leaks, hindsight rows that are right."""

from __future__ import annotations

import os
import random

import pytest

from evolution.gridtext import grid_text
from evolution.programs import random_program, run
from evolution.prompts import (
    CODE_PREFIX,
    REFINE_CUE,
    SAMPLE_CUE,
    refinement_prompt,
    sampling_prompt,
    train_pairs_shown,
)
from evolution.records import Candidate
from evolution.seed_corpus import parent_candidate, relabel, seed_corpus
from evolution.tasks import load_split

TASK = "3c9b0459"  # rotate 180


@pytest.fixture(scope="module")
def task():
    return load_split("arc1-train")[TASK]


@pytest.mark.parametrize("style", ["compact", "numpy"])
def test_sampling_prompt_shows_train_pairs_and_test_inputs_never_test_outputs(task, style):
    prompt = sampling_prompt(task.without_answers(), style)
    grid_style = "digits" if style == "compact" else "numpy"
    for ex in task.train:
        assert grid_text(ex.input, grid_style) in prompt and grid_text(ex.output, grid_style) in prompt
    assert grid_text(task.test[0].input, grid_style) in prompt
    assert grid_text(task.test[0].output, grid_style) not in prompt
    if style == "compact":
        assert prompt.endswith(SAMPLE_CUE) and train_pairs_shown(prompt) == len(task.train)
    else:
        assert "transform(grid)" in prompt and "shape 3x3" in prompt


def test_compact_sampling_prompt_never_shows_test_outputs_even_with_answers(task):
    assert grid_text(task.test[0].output, "digits") not in sampling_prompt(task, "compact")


def test_one_shot_example_must_come_from_another_task(task):
    with pytest.raises(ValueError, match="another task"):
        sampling_prompt(task, "numpy", example=(task, "def transform(grid): return grid"))
    other = load_split("arc1-train")["68b16354"]
    prompt = sampling_prompt(task, "numpy", example=(other, "def transform(grid):\n    return grid[::-1]"))
    assert "return grid[::-1]" in prompt


@pytest.mark.parametrize("style", ["compact", "numpy"])
def test_refinement_prompt_shows_code_verdicts_and_wrong_outputs(task, style):
    wrong = tuple(ex.input for ex in task.train)  # an identity program's outputs
    parent = Candidate(task.id, "def transform(grid):\n    return grid\n", "h", train_correct=(False,) * len(task.train),
                       train_outputs=wrong, test_outputs=(task.test[0].input,))
    prompt = refinement_prompt(task.without_answers(), parent, style)
    assert "return grid" in prompt and f"0 of {len(task.train)} train pairs" in prompt
    assert grid_text(wrong[0], "digits" if style == "compact" else "numpy") in prompt
    if style == "compact":
        assert prompt.endswith(REFINE_CUE)


@pytest.mark.parametrize("style", ["compact", "numpy"])
def test_refinement_prompts_start_with_the_sampling_prompt_so_a_prefix_cache_shares_the_task(task, style):
    parent = Candidate(task.id, "def transform(grid):\n    return grid\n", "h", train_correct=(False,) * len(task.train),
                       train_outputs=tuple(ex.input for ex in task.train), test_outputs=(task.test[0].input,))
    visible = task.without_answers()
    other = load_split("arc1-train")["68b16354"]
    for example in ([None] if style == "compact" else [None, (other, "def transform(grid):\n    return grid[::-1]")]):
        sampling = sampling_prompt(visible, style, example)
        head = sampling.removesuffix(SAMPLE_CUE) if style == "compact" else sampling
        assert refinement_prompt(visible, parent, style, example=example).startswith(head)


def test_refinement_prompt_drops_feedback_grids_to_fit_and_keeps_the_verdicts(task):
    wrong = tuple(ex.input for ex in task.train)
    parent = Candidate(task.id, CODE_PREFIX + "    grid = rot90(grid)\n    return grid\n", "h",
                       train_correct=(False,) * len(task.train), train_outputs=wrong, test_outputs=(task.test[0].input,))
    full = refinement_prompt(task.without_answers(), parent, "compact")
    assert refinement_prompt(task.without_answers(), parent, "compact", max_chars=len(full)) == full
    short = refinement_prompt(task.without_answers(), parent, "compact", max_chars=len(full) - 1)
    assert len(short) < len(full) and "0 of" in short and short.endswith(REFINE_CUE)
    bare = refinement_prompt(task.without_answers(), parent, "compact", max_chars=10)  # cannot fit: all grids go
    assert "its output" not in bare and "train pairs: no" in bare and "rot90" in bare


def test_hindsight_relabel_defines_a_task_its_program_solves(task):
    rng = random.Random(3)
    inputs = [ex.input for ex in task.train + task.test]
    made = 0
    for _ in range(50):
        program = random_program(rng, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], [0, 1, 2, 3], 2)
        new = relabel(inputs, program, rng, "h")
        if new is None:
            continue
        made += 1
        assert all(run(program, ex.input) == ex.output for ex in new.train + new.test)
        assert sorted(ex.input for ex in new.train + new.test) == sorted(inputs)
    assert made > 10


def test_parent_candidate_is_none_for_a_correct_program(task):
    rng = random.Random(0)
    inputs = [ex.input for ex in task.train + task.test]
    program = random_program(rng, [1, 2], [1, 2], 1)
    new = relabel(inputs, program, rng, "h") or relabel(inputs, (program[0],), rng, "h")
    if new is not None:
        assert parent_candidate(new, program) is None


def test_seed_corpus_rows_and_exclusions():
    all_small = load_split("arc1-train")
    keep = "3c9b0459"
    exclude = [tid for tid in all_small if tid != keep]
    rows = seed_corpus(n=40, seed=1, exclude_tasks=exclude, refine_frac=0.3)
    assert len(rows) == 40
    inputs = {grid_text(ex.input, "digits") for ex in all_small[keep].train + all_small[keep].test}
    for row in rows:
        assert row["completion"].startswith("    grid = ") and row["completion"].endswith("    return grid\n")
        assert row["prompt"].endswith(CODE_PREFIX)
        assert any(g in row["prompt"] for g in inputs), "rows come only from the task not excluded"
    assert any(r["prompt"].endswith(REFINE_CUE) for r in rows) and any(r["prompt"].endswith(SAMPLE_CUE) for r in rows)
    assert seed_corpus(n=10, seed=1, exclude_tasks=exclude) == seed_corpus(n=10, seed=1, exclude_tasks=exclude)


@pytest.mark.parametrize("style", ["compact", "numpy"])
def test_a_tasks_prompts_start_with_the_task_so_the_prefix_cache_shares_it(task, style):
    """The engines' prefix caches reuse a common leading text only: a task's refinement
    prompts must all begin with the task's grids (before any parent program), and compact
    sampling and refinement prompts with the same task text."""
    from evolution.prompts import render_task

    visible = task.without_answers()
    rng = random.Random(0)
    cols = sorted({v for ex in task.train for row in ex.input + ex.output for v in row})
    parents = [p for p in (parent_candidate(task, random_program(rng, cols, cols, 2)) for _ in range(40)) if p][:3]
    assert len(parents) >= 2
    prompts = [refinement_prompt(visible, p, style, 1900) for p in parents]
    common = os.path.commonprefix(prompts)
    grids = render_task(visible, style)
    assert grids in common and not any(p.code.strip() in common for p in parents)
    if style == "compact":
        assert sampling_prompt(visible, style).startswith(grids) and common.startswith(grids)


def test_prompt_format_auto_is_chat_for_chat_models_and_text_for_seeds(tmp_path):
    from common.config import load_config
    from evolution.config import SoarConfig
    from evolution.loop import with_prompt_format

    chat = tmp_path / "chat-model"
    chat.mkdir()
    (chat / "chat_template.jinja").write_text("{{ messages }}")
    numpy = load_config(None, SoarConfig, ["search.prompt_style=numpy"])
    assert with_prompt_format(numpy, str(chat)).search.prompt_format == "chat"
    assert with_prompt_format(numpy, "models/soar-demo-seed").search.prompt_format == "text"  # a seed: plain text
    explicit = load_config(None, SoarConfig, ["search.prompt_style=numpy", "search.prompt_format=text"])
    assert with_prompt_format(explicit, str(chat)).search.prompt_format == "text"
    compact = load_config(None, SoarConfig, ["search.prompt_style=compact"])
    with pytest.raises(ValueError, match="is a chat model, but search.prompt_style=compact"):
        with_prompt_format(compact, str(chat))
    # said explicitly, compact prompts as chat messages are for a chat model taught them (models/smollm2-arc-lora)
    taught = load_config(None, SoarConfig, ["search.prompt_style=compact", "search.prompt_format=chat"])
    assert with_prompt_format(taught, str(chat)).search.prompt_format == "chat"


def test_one_shot_example_is_stable_and_never_the_task_itself():
    from evolution.prompts import one_shot_example

    examples = {k: (k, f"code {k}") for k in ("a", "b", "c")}
    assert one_shot_example("a", examples) == one_shot_example("a", dict(reversed(examples.items())))
    assert all(one_shot_example(t, examples)[0] != t for t in examples)
    assert one_shot_example("a", {"a": ("a", "x")}) is None


def test_one_shot_examples_never_show_searched_or_held_out_tasks_and_fit_the_budget():
    """A held-out task's code in a prompt leaks its answer; a 20x20 example (00d62c1b, 4,900
    characters) once made a 3x3 task's prompt 4,900 tokens, past SmolLM2's 4,096 in the config."""
    from evolution.loop import one_shot_examples
    from evolution.prompts import sampling_prompt

    every = one_shot_examples(None, set())
    assert "00d62c1b" in every and "74dd1130" in every
    fitting = one_shot_examples(2000, {"74dd1130", "3c9b0459"})
    assert "00d62c1b" not in fitting and not {"74dd1130", "3c9b0459"} & set(fitting)
    assert fitting and all(len(sampling_prompt(task, "numpy")) <= 2000 for task, _ in fitting.values())
    assert set(every) - set(fitting) == {"00d62c1b", "74dd1130", "3c9b0459"}
