"""SOAR prompts: sampling (write `transform`) and refinement (repair a program from feedback).

Two styles share one structure. "numpy" is for strong code models (instructions, colour
legend, numpy-style grids, an optional one-shot solved example from another task). "compact"
is for small seed models: digit grids plus features a small model can use (shapes, colour
sets, how many cells change), ending in a cue the seed corpus teaches.
The refinement prompt shows the parent program, which train pairs it solved, its wrong
outputs (capped) and its test outputs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Literal

from common.sampling import Messages, Prompt
from evolution.gridtext import colour_set, grid_text, shape
from evolution.records import Candidate
from verifiers.arc.grids import ArcTask, Grid

PromptStyle = Literal["numpy", "compact"]
# "chat": each prompt is one user message (the checkpoint's chat template renders it) and the
# answer an assistant message; "text": plain prompts the model continues; "auto": chat for a
# checkpoint with a chat template that is not a ratchet seed (training.checkpoints.is_chat_model).
PromptFormat = Literal["auto", "chat", "text"]
COLOURS = "0 black, 1 blue, 2 red, 3 green, 4 yellow, 5 grey, 6 magenta, 7 orange, 8 light blue, 9 maroon"
# Compact prompts end with the program's fixed first lines, so a small model writes only the
# body (`    grid = rot90(grid)` ...): shorter to learn and to generate, and every sample starts
# as a parseable program. `program_from_completion` puts the prefix back.
CODE_PREFIX = "from evolution.dsl import *\ndef transform(grid):\n"
SAMPLE_CUE = "program\n" + CODE_PREFIX
REFINE_CUE = "better program\n" + CODE_PREFIX
MAX_WRONG_SHOWN = 2  # wrong outputs shown in a refinement prompt (prompts stay short)


def _pair_header(i: int, inp: Grid, out: Grid) -> str:
    head = f"pair {i}: {shape(inp)} -> {shape(out)}, colours {colour_set(inp)} -> {colour_set(out)}"
    if shape(inp) == shape(out):
        changed = sum(a != b for ra, rb in zip(inp, out, strict=True) for a, b in zip(ra, rb, strict=True))
        head += f", {changed} cells change"
    return head


def compact_task(task: ArcTask) -> str:
    parts = ["task"]
    for i, ex in enumerate(task.train, 1):
        parts += [_pair_header(i, ex.input, ex.output), grid_text(ex.input, "digits"), "->",
                  grid_text(ex.output, "digits")]
    for i, ex in enumerate(task.test, 1):
        parts += [f"test {i}: {shape(ex.input)}, colours {colour_set(ex.input)}", grid_text(ex.input, "digits")]
    return "\n".join(parts) + "\n"


def numpy_task(task: ArcTask) -> str:
    parts = []
    for i, ex in enumerate(task.train, 1):
        parts += [f"## Example {i}", f"Input (shape {shape(ex.input)}):", grid_text(ex.input, "numpy"),
                  f"Output (shape {shape(ex.output)}):", grid_text(ex.output, "numpy"), ""]
    for i, ex in enumerate(task.test, 1):
        parts += [f"## Test input {i} (shape {shape(ex.input)}):", grid_text(ex.input, "numpy"), ""]
    return "\n".join(parts)


def sampling_prompt(task: ArcTask, style: PromptStyle = "compact",
                    example: tuple[ArcTask, str] | None = None) -> str:
    """Ask for a `transform(grid)` for this task. `example` = (another solved task, its code)."""
    if style == "compact":
        return compact_task(task) + SAMPLE_CUE
    if style != "numpy":
        raise ValueError(f"prompt style {style!r} is unknown; use 'compact' or 'numpy'")
    if example is not None and example[0].id == task.id:
        raise ValueError(f"the one-shot example must come from another task, not {task.id!r}")
    intro = (
        "You are solving an ARC puzzle. Each example maps an input grid to an output grid by one "
        "hidden rule. Grids are numpy arrays of colours: " + COLOURS + ".\n"
        "Write a Python function `transform(grid)` that takes the input as a list of lists of "
        "ints and returns the output grid. You may use numpy. Answer with one ```python block.\n\n"
    )
    shot = ""
    if example is not None:
        shot = f"# Solved example puzzle\n{numpy_task(example[0])}\n```python\n{example[1].strip()}\n```\n\n"
    return intro + shot + "# Puzzle to solve\n" + numpy_task(task.without_answers())


def _feedback_lines(parent: Candidate, task: ArcTask, style: PromptStyle, wrong_shown: int = MAX_WRONG_SHOWN,
                    show_test: bool = True) -> list[str]:
    grid_style = "digits" if style == "compact" else "numpy"
    verdicts = " ".join("yes" if ok else "no" for ok in parent.train_correct)
    lines = [f"it solved {sum(parent.train_correct)} of {len(task.train)} train pairs: {verdicts}"]
    wrong = [i for i, ok in enumerate(parent.train_correct) if not ok][:wrong_shown]
    for i in wrong:
        out = parent.train_outputs[i] if i < len(parent.train_outputs) else None
        lines += [f"its output for pair {i + 1}:", "(error)" if out is None else grid_text(out, grid_style)]
    for i, out in enumerate(parent.test_outputs if show_test else (), 1):
        lines += [f"its output for test {i}:", "(error)" if out is None else grid_text(out, grid_style)]
    return lines


def refinement_prompt(task: ArcTask, parent: Candidate, style: PromptStyle = "compact",
                      max_chars: int | None = None, example: tuple[ArcTask, str] | None = None) -> str:
    """Ask for an improved program given the parent and how it did.

    Both styles start with the task's sampling prompt text (compact: the task; numpy: the
    whole sampling prompt, with the same one-shot `example`), so a task's sampling and
    refinement prompts share their prefix and an engine's prefix cache serves the grids once.

    With `max_chars`, the parent's output grids are dropped (wrong train outputs first, then
    test outputs) until the prompt fits: a small model's context is short and large tasks'
    feedback would not fit it. The verdicts per train pair always stay.
    """
    if style != "compact":
        return _numpy_refinement(task, parent, example)
    head = compact_task(task) + "previous program\n" + parent.code.rstrip() + "\n"
    prompt = ""
    for wrong_shown, show_test in ((MAX_WRONG_SHOWN, True), (1, True), (0, True), (0, False)):
        feedback = _feedback_lines(parent, task, style, wrong_shown, show_test)
        prompt = head + "\n".join(feedback) + "\n" + REFINE_CUE
        if max_chars is None or len(prompt) <= max_chars:
            break
    return prompt


def _numpy_refinement(task: ArcTask, parent: Candidate, example: tuple[ArcTask, str] | None) -> str:
    feedback = _feedback_lines(parent, task, "numpy")
    return (sampling_prompt(task, "numpy", example) + "# Previous program\n```python\n" + parent.code.strip()
            + "\n```\n# How it did\n" + "\n".join(feedback) + "\n\nFind the mistake in that program and write "
            "a corrected `transform(grid)` in one ```python block.\n")


def program_from_completion(text: str, style: PromptStyle) -> str:
    """The full program text: compact prompts already hold its first lines."""
    return CODE_PREFIX + text if style == "compact" else text


def completion_from_program(code: str, style: PromptStyle) -> str:
    """The completion a model should write for `code` after a prompt of this style: a compact
    prompt's body, or the one ```python block a numpy-style prompt asks for."""
    if style == "compact":
        return code[len(CODE_PREFIX):] if code.startswith(CODE_PREFIX) else code
    return "```python\n" + code.strip() + "\n```"


def as_prompt(text: str, chat: bool) -> Prompt:
    """A prompt text as the model is asked it: one user message for a chat model."""
    return [{"role": "user", "content": text}] if chat else text


def as_completion(text: str, chat: bool) -> str | Messages:
    """A training completion in TRL's format: the assistant's message for a chat model."""
    return [{"role": "assistant", "content": text}] if chat else text


def one_shot_example(task_id: str, examples: Mapping[str, tuple[ArcTask, str]]) -> tuple[ArcTask, str] | None:
    """The solved example a task's numpy-style prompts show: another task's, picked by a stable
    hash (not Python's salted hash()), so a restart, the measurement and the hindsight rows of
    the task all show the same one."""
    others = sorted(k for k in examples if k != task_id)
    pick = int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:8], "little")
    return examples[others[pick % len(others)]] if others else None


def train_pairs_shown(prompt: str) -> int:
    """How many train pairs a compact prompt shows (used by tests and dataset checks)."""
    return sum(1 for line in prompt.splitlines() if line.startswith("pair "))


def render_task(task: ArcTask, style: PromptStyle) -> str:
    return compact_task(task) if style == "compact" else numpy_task(task)


__all__: Sequence[str] = ["CODE_PREFIX", "as_completion", "as_prompt", "one_shot_example", "REFINE_CUE", "SAMPLE_CUE", "completion_from_program", "program_from_completion",
                          "refinement_prompt", "render_task", "sampling_prompt"]
