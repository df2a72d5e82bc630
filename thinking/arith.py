"""The offline demo's domain: multi-step arithmetic, where working fits in a thought.

    instructions(48, seed=1)          -> [{"id", "instruction", "reference"}]  ("7+8-5" -> "10")
    seed_corpus(n, seed)              -> prompt/completion rows for training.seed
    demo_seed()                       -> the recipe of models/tpo-arith-seed (training.embedded)

Only the final response is judged (the programmatic judge compares its last number with
the reference), so the working helps only if it lives in the thought. The shipped seed
answers directly ("Q: 7+8-5\nA: 10") and, in the thought format, has two habits: careful
step-by-step working (" 7+8=15. 15-5=10.") and a careless one that marks itself (" Rough: "
then working whose steps slip by 1-2 two times in five). Nothing tells it which habit to use;
preference training on judged responses has to find that the careful one leads to right
answers. Rows whose prompt already holds working with one slip teach each step to work from
the value written before it (`carried_slip`), so a right answer comes from right working.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from thinking.prompts import DirectPrompt, DirectPromptConfig, ThoughtPrompt, ThoughtPromptConfig

MAX_OPERAND = 9  # single-digit operands: each step is a fact a tiny model can learn; chaining them is the hard part
DEMO_TEMPLATE = "Think after \"{thought_marker}\", answer after \"{response_marker}\".\nQ: {instruction}"
DEMO_THOUGHT = ThoughtPromptConfig(kind="custom", template=DEMO_TEMPLATE, thought_marker="Work:",
                                   response_marker="So:")
DEMO_DIRECT = DirectPromptConfig(template="Q: {instruction}\nA:")


def _chain(rng: random.Random, ops: int) -> tuple[int, list[tuple[str, int]]]:
    start = rng.randint(1, MAX_OPERAND)
    v, steps = start, []
    for _ in range(ops):
        b = rng.randint(1, MAX_OPERAND)
        if v > b and rng.random() < 0.4:  # results stay positive
            steps.append(("-", b))
            v -= b
        else:
            steps.append(("+", b))
            v += b
    return start, steps


def _text(start: int, steps: list[tuple[str, int]]) -> str:
    return str(start) + "".join(f"{op}{b}" for op, b in steps)


def _value(start: int, steps: list[tuple[str, int]]) -> int:
    v = start
    for op, b in steps:
        v = v + b if op == "+" else v - b
    return v


def instructions(n: int, seed: int, min_ops: int = 2, max_ops: int = 3) -> list[dict[str, str]]:
    """n arithmetic instructions with gold answers; ids carry the seed so splits never collide."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        start, steps = _chain(rng, rng.randint(min_ops, max_ops))
        rows.append({"id": f"ar{seed}-{i}", "instruction": _text(start, steps), "reference": str(_value(start, steps))})
    return rows


def one_step_instructions(n: int, seed: int) -> list[dict[str, str]]:
    """n one-operation instructions ("7+8"): SmolLM2-135M-Instruct answers some of them right, and
    none of the two- and three-step chains, so only these give its judge right and wrong to tell apart."""
    return instructions(n, seed, min_ops=1, max_ops=1)


def _steps(start: int, steps: list[tuple[str, int]], rng: random.Random, slips: Callable[[int], bool],
           floor: bool = True) -> tuple[list[str], int]:
    """Each step ("7+8=15.") worked from the value written before it; where `slips(k)` the result
    is off by 1-2 (not below zero with `floor`). Returns the steps and the value they end on."""
    v, parts = start, []
    for k, (op, b) in enumerate(steps):
        r = v + b if op == "+" else v - b
        if slips(k):
            r += rng.choice([-2, -1, 1, 2])
            r = max(0, r) if floor else r
        parts.append(f"{v}{op}{b}={r}.")
        v = r
    return parts, v


def working(start: int, steps: list[tuple[str, int]], rng: random.Random, corrupt: bool) -> tuple[str, int]:
    """Step-by-step working (" 7+8=15. 15-5=10.") and the value it ends on; corrupt: one step off."""
    bad = rng.randrange(len(steps)) if corrupt else -1
    parts, v = _steps(start, steps, rng, lambda k: k == bad, floor=False)
    return " " + " ".join(parts), v


def habit(start: int, steps: list[tuple[str, int]], rng: random.Random, kind: str, slip: float) -> tuple[str, int]:
    """A thinking habit that does not help: "rough" (" Rough: 7+8=16. 16-5=11.", each step off by
    1-2 with probability `slip`, later steps carrying the slip) or "guess" (" Guess: 10.", the
    answer without working, wrong with probability `slip`). Its first word marks it."""
    if kind == "guess":
        v = _value(start, steps)
        return f" Guess: {max(0, v + rng.choice([-2, -1, 1, 2])) if rng.random() < slip else v}.", v
    parts, v = _steps(start, steps, rng, lambda _: rng.random() < slip)
    return " Rough: " + " ".join(parts), v


def carried_slip(prompt: str, start: int, steps: list[tuple[str, int]], rng: random.Random) -> dict[str, str]:
    """A row that teaches each step to work from the value written before it: the prompt holds
    the first steps of the working with one of them off by 1-2, the completion carries that value
    on correctly to the response. The slip is in the prompt, so the model never learns to make one."""
    k = rng.randint(1, len(steps) - 1)
    bad = rng.randrange(k)
    parts, v = _steps(start, steps, rng, lambda i: i == bad)
    given, rest = " " + " ".join(parts[:k]), " " + " ".join(parts[k:])
    return {"prompt": prompt + given, "completion": f"{rest} {DEMO_THOUGHT.response_marker} {v}"}


def seed_corpus(n: int = 6000, seed: int = 0, thought_share: float = 0.3, corrupt_share: float = 0.5,
                habit_share: float = 0.0, habit_kind: str = "rough", slip: float = 0.4,
                max_ops: int = 3, repair_share: float = 0.0) -> list[dict]:
    """Direct-answer rows, and thought-format rows: a `habit_share` of them in an unhelpful
    habit (see `habit`), the rest step-by-step working of which a `corrupt_share` has one wrong
    step. The response always follows the working."""
    if habit_kind not in ("rough", "guess"):
        raise ValueError(f"habit_kind={habit_kind!r} must be 'rough' or 'guess'")
    rng = random.Random(seed)
    thought, direct = ThoughtPrompt(DEMO_THOUGHT), DirectPrompt(DEMO_DIRECT)
    rows: list[dict[str, Any]] = []
    for _ in range(n):
        start, steps = _chain(rng, rng.randint(1, max_ops))
        instr = _text(start, steps)
        if rng.random() < thought_share:
            if repair_share and len(steps) > 1 and rng.random() < repair_share:
                rows.append(carried_slip(thought.build(instr), start, steps, rng))
                continue
            if habit_share and rng.random() < habit_share:
                work, v = habit(start, steps, rng, habit_kind, slip)
            else:
                work, v = working(start, steps, rng, rng.random() < corrupt_share)
            rows.append({"prompt": thought.build(instr), "completion": f"{work} {DEMO_THOUGHT.response_marker} {v}"})
        else:
            v = _value(start, steps)
            rows.append({"prompt": direct.build(instr), "completion": f" {v}"})
    return rows


def demo_seed():
    """The recipe of the shipped seed model models/tpo-arith-seed."""
    from training.seed import SeedConfig

    # Measured on 256 held-out instructions (docs/results.md, TPO). The earlier seed (half thought rows, half of those
    # with one wrong step in the completion) learned to slip: 47% of its steps wrong at temperature 0.8, and right
    # answers reached through wrong working. Without wrong steps it stopped working from the previous value (greedy
    # thought 0.43); slips moved into the prompt (carried_slip) fixed that, and 6,000 steps with more thought rows
    # taught it to copy operands (greedy thought 0.82 -> with the rough habit's rows 0.89, 0 operand errors).
    return SeedConfig(preset="tiny", corpus="thinking.arith:seed_corpus",
                      corpus_kwargs={"thought_share": 0.75, "corrupt_share": 0.0, "repair_share": 0.35,
                                     "habit_share": 0.5, "habit_kind": "rough", "slip": 0.4},
                      n=36000, max_steps=6000, max_length=160, batch_size=32, learning_rate=5e-4,
                      words="training.corpora:number_words")
