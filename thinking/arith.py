"""The offline demo's domain: multi-step arithmetic, where working fits in a thought.

    instructions(48, seed=1)          -> [{"id", "instruction", "reference"}]  ("7+8-5" -> "10")
    seed_corpus(n, seed)              -> prompt/completion rows for training.seed
    demo_seed()                       -> the recipe of models/tpo-arith-seed (training.embedded)

Only the final response is judged (the programmatic judge compares its last number with
the reference), so the working helps only if it lives in the thought. The seed model
mostly answers directly ("Q: 7+8-5\\nA: 10"); a minority of its rows use the thought
format with unreliable working (half of them have one wrong step, and the response follows
the wrong working), so at iteration 0 thinking is a format the model writes badly, and
preference training has to find which thoughts lead to judged-correct responses.
"""

from __future__ import annotations

import random
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


def instructions(n: int, seed: int, min_ops: int = 2, max_ops: int = 3) -> list[dict[str, str]]:
    """n arithmetic instructions with gold answers; ids carry the seed so splits never collide."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        start, steps = _chain(rng, rng.randint(min_ops, max_ops))
        v = start
        for op, b in steps:
            v = v + b if op == "+" else v - b
        rows.append({"id": f"ar{seed}-{i}", "instruction": _text(start, steps), "reference": str(v)})
    return rows


def working(start: int, steps: list[tuple[str, int]], rng: random.Random, corrupt: bool) -> tuple[str, int]:
    """Step-by-step working (" 7+8=15. 15-5=10.") and the value it ends on; corrupt: one step off."""
    bad = rng.randrange(len(steps)) if corrupt else -1
    v, parts = start, []
    for k, (op, b) in enumerate(steps):
        r = v + b if op == "+" else v - b
        if k == bad:
            r += rng.choice([-2, -1, 1, 2])
        parts.append(f"{v}{op}{b}={r}.")
        v = r
    return " " + " ".join(parts), v


def seed_corpus(n: int = 6000, seed: int = 0, thought_share: float = 0.3, corrupt_share: float = 0.5) -> list[dict]:
    """Direct-answer rows, and a minority of thought-format rows with unreliable working."""
    rng = random.Random(seed)
    thought, direct = ThoughtPrompt(DEMO_THOUGHT), DirectPrompt(DEMO_DIRECT)
    rows: list[dict[str, Any]] = []
    for _ in range(n):
        start, steps = _chain(rng, rng.randint(1, 3))
        instr = _text(start, steps)
        if rng.random() < thought_share:
            work, v = working(start, steps, rng, rng.random() < corrupt_share)
            rows.append({"prompt": thought.build(instr), "completion": f"{work} {DEMO_THOUGHT.response_marker} {v}"})
        else:
            _, v = working(start, steps, rng, False)
            rows.append({"prompt": direct.build(instr), "completion": f" {v}"})
    return rows


def demo_seed():
    """The recipe of the shipped seed model models/tpo-arith-seed."""
    from training.seed import SeedConfig

    # 300 steps left a seed that answered "10" to everything and never closed a thought (0% parsable):
    # the working's single-step facts need many more steps, half the rows in the thought format, and the instruction next
    # to the thought marker. At learning rate 3e-3 (3000 steps) it still could not copy an operand (greedy direct 0.07,
    # thought 0.04); 5e-4 with numbers as whole tokens reaches loss 0.21 (direct 0.69, thought 0.79 greedy).
    return SeedConfig(preset="tiny", corpus="thinking.arith:seed_corpus", corpus_kwargs={"thought_share": 0.5},
                      n=24000, max_steps=4000, max_length=160, batch_size=32, learning_rate=5e-4,
                      words="training.corpora:number_words")
