"""Final answers of math responses: extraction, normalization for voting, equivalence.

Consistency@k votes over *normalized* final answers, and correctness is math-verify
equivalence with the gold answer (`1/2`, `0.5` and `\\frac{1}{2}` agree), so both live here
next to each other and use the same extraction.

    extract_answer("... so the answer is \\boxed{12}.")  -> "12"
    is_equivalent("0.5", "\\frac{1}{2}")                  -> True
    group_answers(["12", "12.0", "13", None])             -> [0, 0, 1, -1]
    grade_answers(["12", "12.0", None], "12", "examples.checkers:exact_text")  -> ([0, 1, -1], [True, False])

A user's checker (`checker: module:function`, called as f(answer, reference) -> bool) replaces
math-verify as the judge of correctness; grade_answers applies it to the extracted answers.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from math_verify import parse, verify

from common.plugins import load_callable

# math-verify enforces its timeouts with SIGALRM, which exists only on the main thread; in
# Ray actors and executor threads we disable them (answers are short) and silence its warning.
logging.getLogger("math_verify").setLevel(logging.ERROR)
_TIMEOUT_S = 5

_ANSWER_LINE = re.compile(r"(?:final answer|answer)\s*(?:is\b|[:=])?\s*([^\s:=].*)", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d+(?:[.,]\d+)*(?:/\d+)?")


def _boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (or \\fbox{...}), braces balanced."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth, j = 1, i
    while j < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        j += 1
    return text[i : j - 1].strip() if depth == 0 else None


def extract_answer(text: str, *, last_number_fallback: bool = True) -> str | None:
    """The response's final answer as written, or None when it states none.

    Priority: the last \\boxed{}; then the last "answer: X" / "the answer is X" line; then
    (if allowed) the last number in the text. A response without any is unanswered, which
    votes for nothing and is never correct.
    """
    if not text:
        return None
    boxed = _boxed(text)
    if boxed:
        return boxed
    matches = list(_ANSWER_LINE.finditer(text))
    if matches:
        lines = matches[-1].group(1).strip().splitlines()
        ans = lines[0].strip().rstrip(".").strip().strip("$").strip() if lines else ""
        if ans:
            return ans
    if last_number_fallback:
        nums = _NUMBER.findall(text)
        if nums:
            return nums[-1]
    return None


@lru_cache(maxsize=65536)
def _parse(answer: str, main_thread: bool) -> tuple:

    timeout = _TIMEOUT_S if main_thread else None
    text = answer if "$" in answer or "\\boxed" in answer else f"${answer}$"
    return tuple(parse(text, parsing_timeout=timeout))


def parsed(answer: str) -> list:
    return list(_parse(answer, threading.current_thread() is threading.main_thread()))


def normalize_answer(answer: str | None) -> str | None:
    """A canonical string for voting: math-verify's parsed value when it parses, else a cleaned string."""
    if answer is None:
        return None
    clean = re.sub(r"\\text\{([^}]*)\}", r"\1", answer).replace("$", "").replace(" ", "").rstrip(".")
    clean = clean.replace(",", "") if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", clean) else clean
    if not clean:
        return None
    p = parsed(clean)
    if p:
        value = str(p[0])
        if re.fullmatch(r"-?\d+\.0+", value):  # 12.0 and 12 are the same vote
            value = value.split(".")[0]
        return value
    return clean.lower()


def is_equivalent(pred: str | None, gold: str) -> bool:
    """math-verify equivalence of a predicted final answer with the gold answer."""
    if pred is None:
        return False
    if normalize_answer(pred) == normalize_answer(gold):
        return True

    g, p = parsed(gold), parsed(pred)
    if not g or not p:
        return False
    main = threading.current_thread() is threading.main_thread()
    return bool(verify(g, p, timeout_seconds=_TIMEOUT_S if main else None))


def group_answers(answers: list[str | None]) -> list[int]:
    """Equivalence-class id per answer (first appearance order); -1 for no answer.

    Normalized strings group first; distinct normalized values are then merged when
    math-verify calls them equivalent (so `0.5` and `1/2` vote together).
    """
    reps: list[str] = []  # one representative answer per class
    by_norm: dict[str, int] = {}
    out = []
    for a in answers:
        norm = normalize_answer(a)
        if norm is None:
            out.append(-1)
            continue
        if norm not in by_norm:
            cls = next((c for c, r in enumerate(reps) if is_equivalent(a, r)), None)
            if cls is None:
                cls = len(reps)
                reps.append(a)
            by_norm[norm] = cls
        out.append(by_norm[norm])
    return out


Checker = Callable[[str, str], bool]  # (extracted final answer, reference answer) -> correct?
EXAMPLE_CHECKER = "examples.checkers:exact_text"  # named in the messages of a checker that does not load


@lru_cache(maxsize=16)
def load_checker(spec: str = "") -> Checker:
    """The checker `spec` names (`module:function`); "" is math-verify's is_equivalent. ConfigError
    (naming the field `checker`) when it does not import, is not callable or takes other arguments."""
    if not spec:
        return is_equivalent
    return load_callable("checker", spec, EXAMPLE_CHECKER, args=("answer", "reference"))


def check_answer(spec: str, answer: str | None, reference: str) -> bool:
    """One verdict of checker `spec`; an answer the extractor did not find is wrong, unchecked.
    A verdict must be a bool: a checker returning "no" (truthy) must not count as correct."""
    if answer is None:
        return False
    try:
        verdict = load_checker(spec)(answer, reference)
    except Exception as e:
        raise RuntimeError(f"checker={spec!r} raised {type(e).__name__}: {e} on answer={answer!r}, "
                           f"reference={reference!r}; fix the function (it must return True or False)") from e
    if not _is_verdict(verdict):
        raise TypeError(f"checker={spec!r} returned {verdict!r} ({type(verdict).__name__}) on answer={answer!r}, "
                        f"reference={reference!r}; it must return True or False")
    return bool(verdict)


def _is_verdict(x: Any) -> bool:
    """True/False, 0/1, or numpy's bool_ (a checker that compares arrays returns one)."""
    if isinstance(x, bool | int):
        return x in (0, 1)
    return getattr(x, "shape", None) == () and getattr(getattr(x, "dtype", None), "kind", None) == "b"


def grade_answers(answers: list[str | None], reference: str, checker: str = "") -> tuple[list[int], list[bool]]:
    """Answer classes (group_answers') and whether each class is correct, by checker spec `checker`.

    math-verify (""): each class judged by one of its answers, as ever. A user's checker judges
    every answer, and a class it calls partly correct is split in two (ids in order of first
    appearance), so every candidate's correctness is the checker's verdict on its own answer,
    while majority voting still counts the answers math-verify and the checker agree on together.
    """
    classes = group_answers(answers)
    if not checker:
        reps = {c: a for a, c in zip(answers, classes, strict=True) if c >= 0}
        return classes, [is_equivalent(reps[c], reference) for c in range(len(reps))]
    split: dict[tuple[int, bool], int] = {}  # (math-verify class, verdict) -> class id
    ids = []
    for answer, cls in zip(answers, classes, strict=True):
        ids.append(-1 if cls < 0 else split.setdefault((cls, check_answer(checker, answer, reference)), len(split)))
    correct = [False] * len(split)
    for (_, ok), i in split.items():
        correct[i] = ok
    return ids, correct


def load_jsonl_dataset(path: str | Path, limit: int | None = None) -> list[dict[str, Any]]:
    """(question, answer) rows from a JSONL file; MATH-500's `problem` is accepted for `question`.

    Rows get an `id` (their own `id`/`unique_id`, else the line number) so stored results
    are keyed stably.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"dataset {path} does not exist; pass a JSONL of {{question, answer}} rows")
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except ValueError as e:
            raise ValueError(f"{path}:{n} is not JSON ({e}); a dataset is JSONL: one "
                             "{\"question\": ..., \"answer\": ...} object per line") from None
        if not isinstance(raw, dict):
            raise ValueError(f"{path}:{n} is a JSON {type(raw).__name__}, not an object; write one "
                             "{\"question\": ..., \"answer\": ...} object per line (JSONL)")
        question = raw.get("question", raw.get("problem"))
        answer = raw.get("answer")
        if question is None or answer is None:
            raise ValueError(f"{path}:{n} needs 'question' (or 'problem') and 'answer'; it has {sorted(raw)}")
        rows.append({"id": str(raw.get("id", raw.get("unique_id", n))), "question": str(question),
                     "answer": str(answer)})
        if limit and len(rows) >= limit:
            break
    return rows
