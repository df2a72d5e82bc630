"""Offline multi-step arithmetic word problems, and the seed corpus that makes search meaningful.

    make_problems(50, seed=1)     -> [{"id", "question", "answer", "steps"}]
    seed_corpus(n=6000, seed=0)   -> prompt/completion rows (training.seed corpus
                                     "scaling.arith_problems:seed_corpus")

A tiny character-level model trained on `seed_corpus` answers with short worked steps
("7+5=12. 12-3=9. Answer: 9"), verifies candidate solutions step by step ("7+5=12 ok.
12-3=8 bad. Verdict: 0") and compares two solutions. Its verification rows hold correct
and subtly corrupted solutions (one step off by a little, a flipped operation, a final
answer that disagrees with the last step), so self-verification has something to find
offline. Prompts come from verifiers.selfverify's "compact" style, so the model is trained
on exactly the prompts the search sends.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from verifiers.selfverify import answer_prompt, compare_prompt, verify_prompt

NAMES = ["Ann", "Bo", "Cy", "Di", "Ed", "Flo", "Gus", "Ivy", "Jo", "Kim", "Lu", "Max"]
ITEMS = ["pens", "cups", "eggs", "cards", "coins", "books", "jars", "keys"]
GAIN = ["gets", "buys", "finds", "wins"]
LOSS = ["loses", "sells", "gives away", "eats"]
MAX_VALUE = 99  # every intermediate result stays in 0..99: two-digit sums for a tiny model


def _problem(rng: random.Random, steps: int, max_start: int = 30, max_operand: int = 20,
             form: str = "word") -> dict[str, Any]:
    value = rng.randint(2, max_start)
    clauses, ops = [], []
    for _ in range(steps):
        can_lose = value >= 2
        if can_lose and (value + 2 > MAX_VALUE or rng.random() < 0.5):
            b = rng.randint(1, min(value, max_operand))
            clauses.append(f"{rng.choice(LOSS)} {b}")
            ops.append(("-", b))
            value -= b
        else:
            b = rng.randint(1, min(max_operand, MAX_VALUE - value))
            clauses.append(f"{rng.choice(GAIN)} {b}")
            ops.append(("+", b))
            value += b
    start = value - sum(b if op == "+" else -b for op, b in ops)
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    if form == "expression":  # the same sum written bare: "What is 23 + 13 - 6?"
        question = f"What is {start} " + " ".join(f"{op} {b}" for op, b in ops) + "?"
    else:
        question = f"{name} has {start} {item}, " + ", ".join(clauses) + ". How many?"
    return {"question": question, "answer": str(value), "start": start, "ops": ops}


def _steps(start: int, ops: list[tuple[str, int]]) -> list[tuple[int, str, int, int]]:
    out, v = [], start
    for op, b in ops:
        r = v + b if op == "+" else v - b
        out.append((v, op, b, r))
        v = r
    return out


def format_solution(steps: list[tuple[int, str, int, int]], answer: int | str) -> str:
    return " ".join(f"{a}{op}{b}={r}." for a, op, b, r in steps) + f" Answer: {answer}"


def make_problems(n: int, seed: int = 0, min_steps: int = 2, max_steps: int = 3, max_start: int = 30,
                  max_operand: int = 20, form: str = "word", prefix: str = "arith") -> list[dict[str, Any]]:
    """n problems with ids, questions, gold answers and the correct worked steps: a start in
    2..max_start, then min_steps..max_steps gains or losses of 1..max_operand; `form` "word" ("Ann
    has 12 pens, gets 5. How many?") or "expression" ("What is 12 + 5?")."""
    if form not in ("word", "expression"):
        raise ValueError(f"form={form!r}: must be 'word' or 'expression'")
    if not 1 <= min_steps <= max_steps:
        raise ValueError(f"min_steps={min_steps}, max_steps={max_steps}: need 1 <= min_steps <= max_steps")
    if not (2 <= max_start <= MAX_VALUE and 1 <= max_operand):
        raise ValueError(f"max_start={max_start}, max_operand={max_operand}: need 2 <= max_start <= {MAX_VALUE}, "
                         "max_operand >= 1")
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        p = _problem(rng, rng.randint(min_steps, max_steps), max_start, max_operand, form)
        steps = _steps(p["start"], p["ops"])
        rows.append({"id": f"{prefix}-{seed}-{i}", "question": p["question"], "answer": p["answer"],
                     "solution": format_solution(steps, p["answer"])})
    return rows


# The generated question sets a scaling config names as `dataset:` (make_problems' arguments).
# "arith" is what the seed model was trained on; SmolLM2-135M-Instruct answers next to none of
# its two- and three-step problems, so the one-step sets give a real model something to select.
DATASETS: dict[str, dict[str, Any]] = {
    "arith": {"min_steps": 2, "max_steps": 3},
    "arith1": {"min_steps": 1, "max_steps": 1},  # one gain or loss: "Ann has 12 pens, gets 5. How many?"
    "arith1-small": {"min_steps": 1, "max_steps": 1, "max_start": 9, "max_operand": 9},  # one-digit numbers
    "sum1": {"min_steps": 1, "max_steps": 1, "form": "expression"},  # "What is 23 + 13?"
    "sum1-small": {"min_steps": 1, "max_steps": 1, "max_start": 9, "max_operand": 9, "form": "expression"},
}


def generated_problems(name: str, n: int, seed: int) -> list[dict[str, Any]]:
    """The first n problems of the generated set `name` (DATASETS), ids prefixed by the name."""
    if name not in DATASETS:
        raise ValueError(f"dataset={name!r} is not a generated set; choose one of {sorted(DATASETS)} or a JSONL path")
    return make_problems(n, seed=seed, prefix=name, **DATASETS[name])


def corrupt(rng: random.Random, start: int, ops: list[tuple[str, int]],
            kinds: tuple[str, ...] = ("arith", "arith", "flip", "answer")) -> tuple[list, int, int]:
    """A subtly wrong solution: (steps, stated answer, index of the first bad step).

    The first bad index may equal len(steps): the steps are right but the answer line is not.
    Kinds: "arith" (a result off by a little), "flip" (the other operation, computed right),
    "answer" (the answer line disagrees with the last step), "carry" (a step starts from a value
    the step before did not give, then computes right).
    """
    steps = _steps(start, ops)
    kind = rng.choice(kinds)
    if kind == "carry" and len(steps) > 1:
        i = rng.randrange(1, len(steps))
        v = steps[i][0] + rng.choice([-2, -1, 1, 2, 10])
        v = v if v >= 0 else steps[i][0] + 1
        bad = steps[:i]
        for _, op2, b2, _ in steps[i:]:
            r2 = v + b2 if op2 == "+" else v - b2
            bad.append((v, op2, b2, r2))
            v = r2
        return bad, v, i
    if kind == "carry":
        kind = "arith"
    if kind == "answer":
        final = steps[-1][3]
        wrong = final + rng.choice([-2, -1, 1, 2, 10])
        return steps, wrong if wrong >= 0 else final + 1, len(steps)
    i = rng.randrange(len(steps))
    a, op, b, r = steps[i]
    if kind == "flip" and ((op == "+" and b <= a) or (op == "-" and a + b <= MAX_VALUE)):
        op = "-" if op == "+" else "+"
        r = a - b if op == "-" else a + b
    else:
        r = r + rng.choice([-2, -1, 1, 2, 10])
        if r < 0:
            r = steps[i][3] + 1
    bad = steps[:i] + [(a, op, b, r)]
    v = r
    for _, op2, b2, _ in steps[i + 1 :]:  # later steps carry the error on, computed correctly
        r2 = v + b2 if op2 == "+" else v - b2
        bad.append((v, op2, b2, r2))
        v = r2
    return bad, v, i


def check_text(steps: list[tuple[int, str, int, int]], answer: int, ops: list[tuple[str, int]], start: int) -> tuple[str, int]:
    """The verifier's worked check: each statement with ok/bad, stopping at the first error."""
    parts, v = [], start
    for (a, op, b, r), (gold_op, gold_b) in zip(steps, ops, strict=True):
        good = a == v and op == gold_op and b == gold_b and r == (a + b if op == "+" else a - b)
        parts.append(f"{a}{op}{b}={r} {'ok' if good else 'bad'}.")
        if not good:
            return " ".join(parts), 0
        v = r
    good = answer == v
    parts.append(f"Answer {answer} {'ok' if good else 'bad'}.")
    return " ".join(parts), int(good)


def check_redo(steps: list[tuple[int, str, int, int]], answer: int, start: int) -> tuple[str, int]:
    """A check that reads the candidate: each step's operands copied, its result redone before the
    candidate's is copied beside it ("15-5 is 10, says 11: bad."), a step that does not start from the
    step before's result marked ("12+3 from 13: bad."), then the answer against the last result.

    The redone result comes after "is", a form the candidate never shows, so the model must compute it
    (copying the candidate's "=11" does not fit), and the verdict compares two tokens just written.
    Operands are not checked against the question: only what the steps themselves show."""
    parts, v = [], None
    for a, op, b, r in steps:
        if v is not None and a != v:
            parts.append(f"{a}{op}{b} from {v} bad.")
            return " ".join(parts), 0
        true = a + b if op == "+" else a - b
        good = r == true
        parts.append(f"{a}{op}{b} is {true}, says {r} {'ok' if good else 'bad'}.")
        if not good:
            return " ".join(parts), 0
        v = r
    good = answer == v
    parts.append(f"Answer is {v}, says {answer} {'ok' if good else 'bad'}.")
    return " ".join(parts), int(good)


def noisy_solution(rng: random.Random, start: int, ops: list[tuple[str, int]]) -> tuple[list, int]:
    """A solution with independent slips, as a sampled one has: a misread start or operand, a value
    not carried, a result off by a little, an answer that disagrees; at least one slip."""
    def off(x: int) -> int:
        y = x + rng.choice([-2, -1, 1, 2, 10])
        return y if y >= 0 else x + 1

    while True:
        steps, v, slips = [], start, 0
        for i, (op, b) in enumerate(ops):
            a = v
            if rng.random() < (0.1 if i == 0 else 0.15):
                a, slips = off(a), slips + 1
            if rng.random() < 0.15:
                b2 = max(1, off(b))
                b, slips = b2, slips + (b2 != b)
            if op == "-" and a < b:  # keep every number a whole token (0..199): no negative results
                a, b = b, a
            r = a + b if op == "+" else a - b
            if rng.random() < 0.3:
                r, slips = off(r), slips + 1
            steps.append((a, op, b, r))
            v = r
        answer = v
        if rng.random() < 0.1:
            answer = off(v)
        if slips or answer != v:
            return steps, answer


def check_trace(steps: list[tuple[int, str, int, int]], answer: int, ops: list[tuple[str, int]],
                start: int) -> tuple[str, int]:
    """check_redo over every step, not only up to the first bad one, with a step's start checked
    against the question's start or the step before's stated result ("from 13"), and its operand
    against the question ("asks -4"). Every step is judged on its own, so after a slip the check
    still reads the candidate (a shortcut that writes its own solution is wrong there)."""
    parts, v, verdict = [], start, 1
    for (a, op, b, r), (gold_op, gold_b) in zip(steps, ops, strict=True):
        if a != v:
            parts.append(f"{a}{op}{b} from {v} bad.")
            verdict = 0
        elif (op, b) != (gold_op, gold_b):
            parts.append(f"{a}{op}{b} asks {gold_op}{gold_b} bad.")
            verdict = 0
        else:
            true = a + b if op == "+" else a - b
            parts.append(f"{a}{op}{b} is {true}, says {r} {'ok' if r == true else 'bad'}.")
            verdict &= int(r == true)
        v = r
    parts.append(f"Answer is {v}, says {answer} {'ok' if answer == v else 'bad'}.")
    return " ".join(parts), verdict & int(answer == v)


CHECKS = ("step", "redo", "trace", "verdict")


def seed_corpus(
    n: int = 6000, seed: int = 0, verify_fraction: float = 0.45, compare_fraction: float = 0.1,
    corrupt_fraction: float = 0.5, min_steps: int = 2, max_steps: int = 3, check: str = "step",
) -> list[dict[str, str]]:
    """Rows for training.seed: solving, verifying (correct and corrupted) and comparing.

    `check`: "step" writes each step with ok/bad (check_text: operands against the question too);
    "redo" redoes each step's result before copying the candidate's (check_redo); "trace" does
    so for every step of candidates with independent slips (noisy_solution, check_trace);
    "verdict" judges the same noisy candidates with the verdict alone (" Verdict: 0"): with no
    written check there is no place to write its own solution instead of reading the candidate
    (what the tiny model did with every written format; docs/results.md lists what each one measured)."""
    if verify_fraction + compare_fraction > 1:
        raise ValueError("verify_fraction + compare_fraction must be <= 1")
    if check not in CHECKS:
        raise ValueError(f"check={check!r}: must be one of {CHECKS}")
    kinds = ("arith", "arith", "carry", "answer") if check == "redo" else ("arith", "arith", "flip", "answer")

    def checked(steps: list, ans: int, ops: list, start: int) -> tuple[str, int]:
        if check == "verdict":
            return "", check_trace(steps, ans, ops, start)[1]
        if check == "trace":
            return check_trace(steps, ans, ops, start)
        return check_redo(steps, ans, start) if check == "redo" else check_text(steps, ans, ops, start)

    def corrupted(start: int, ops: list) -> tuple[list, int]:
        if check in ("trace", "verdict"):
            return noisy_solution(rng, start, ops)
        steps, ans, _ = corrupt(rng, start, ops, kinds)
        return steps, ans

    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        p = _problem(rng, rng.randint(min_steps, max_steps))
        q, start, ops = p["question"], p["start"], p["ops"]
        good = _steps(start, ops)
        good_text = format_solution(good, p["answer"])
        u = rng.random()
        if u < verify_fraction:
            if rng.random() < corrupt_fraction:
                steps, ans = corrupted(start, ops)
            else:
                steps, ans = good, int(p["answer"])
            text, verdict = checked(steps, ans, ops, start)
            rows.append({"prompt": verify_prompt(q, format_solution(steps, ans), "compact"),
                         "completion": f"{' ' + text if text else ''} Verdict: {verdict}"})
        elif u < verify_fraction + compare_fraction:
            steps, ans = corrupted(start, ops)
            pair = [(good, int(p["answer"])), (steps, ans)]
            if rng.random() < 0.5:
                pair.reverse()
            checks = [checked(s, a, ops, start) for s, a in pair]
            winner = 1 if checks[0][1] == 1 else 2
            body = "" if check == "verdict" else f" A1 {checks[0][0]} A2 {checks[1][0]}"
            rows.append({"prompt": compare_prompt(q, format_solution(*pair[0]), format_solution(*pair[1]), "compact"),
                         "completion": f"{body} Verdict: {winner}"})
        else:
            rows.append({"prompt": answer_prompt(q, "compact"), "completion": f" {good_text}"})
    return rows


def write_jsonl(rows: list[dict[str, Any]], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def arith_triples(n: int, seed: int = 0, min_steps: int = 2, max_steps: int = 3) -> list[dict[str, str]]:
    """(question, correct, wrong) triples for the verification benchmark: gold vs corrupted."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        p = _problem(rng, rng.randint(min_steps, max_steps))
        steps, ans, _ = corrupt(rng, p["start"], p["ops"])
        rows.append({"question": p["question"], "correct": format_solution(_steps(p["start"], p["ops"]), p["answer"]),
                     "wrong": format_solution(steps, ans)})
    return rows
