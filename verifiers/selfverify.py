"""Self-verification and pairwise-comparison prompts, and verdict parsing that never guesses.

Sampling-based search asks the model itself whether a response is correct: it rewrites the
response as statements, each with its justification, scans them for errors, and ends with a
0/1 verdict (rewriting lowers false positives and negatives). Ties in the top group are
broken by asking which of two responses is correct; comparing side by side localises errors.

Two prompt styles share one verdict grammar:
- "full": instructions in prose, for real chat models (returns chat messages);
- "compact": terse text the offline seed model is trained on (scaling.arith_problems).

An unparsable verdict is `Verdict(None, "unparsable")`: it is stored as such and left out of
averages, never turned into a 0 or a 1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from common.sampling import Prompt
from verifiers.math_answers import extract_answer

Style = Literal["full", "compact"]
STYLES: tuple[str, ...] = ("full", "compact")

VERIFY_INSTRUCTIONS = (
    "You are checking a candidate solution to a math problem.\n"
    "1. Rewrite the solution as a numbered list of statements, each followed by its "
    "justification (the earlier statements or facts it follows from), like a theorem with "
    "lemmas and proofs.\n"
    "2. Scan every statement for errors: recompute each calculation, check each inference, and "
    "check that the final answer answers the question asked.\n"
    "3. End with exactly one line `Verdict: 1` if the solution and its final answer are correct, "
    "or `Verdict: 0` if there is any error."
)
COMPARE_INSTRUCTIONS = (
    "Two candidate solutions to the same math problem reach different final answers, so at "
    "most one is correct.\n"
    "Rewrite each as statements with their justifications, find where they first diverge, and "
    "decide which statement there is correct.\n"
    "End with exactly one line `Verdict: 1` if Response 1 is correct or `Verdict: 2` if "
    "Response 2 is correct."
)


@dataclass(frozen=True)
class Verdict:
    value: int | None  # verification: 1 correct / 0 wrong; comparison: 1 or 2 (the better one)
    status: Literal["ok", "unparsable"]

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _check_style(style: str) -> None:
    if style not in STYLES:
        raise ValueError(f"prompt style {style!r} is unknown; choose one of {list(STYLES)}")


# What the full-style answer prompt adds after the question.
ANSWER_INSTRUCTION = "\n\nSolve step by step and put the final answer in \\boxed{}."


def answer_prompt(question: str, style: Style = "full") -> Prompt:
    """The prompt that samples candidate solutions."""
    _check_style(style)
    if style == "compact":
        return f"Q: {question}\nA:"
    return [{"role": "user", "content": question + ANSWER_INSTRUCTION}]


def question_in(text: str) -> str:
    """The question of a full-style answer prompt's text (the instruction taken off); other text as it is."""
    return text.removesuffix(ANSWER_INSTRUCTION)


View = Literal["solution", "answer"]
VIEWS: tuple[str, ...] = ("solution", "answer")
ANSWER_CHECK = ("Is the proposed final answer to this problem correct? Work it out, then end with exactly one "
                "line `Verdict: 1` if it is correct or `Verdict: 0` if it is not.")


def verify_prompt(question: str, response: str, style: Style = "full", view: View = "solution") -> Prompt:
    """Ask whether `response` answers `question` correctly (verdict 0/1). `view`: what the checker
    sees, the whole solution (the paper's), or its final answer alone (extracted; "none" without one),
    a short prompt where a small checker only has to redo the arithmetic."""
    _check_style(style)
    if view not in VIEWS:
        raise ValueError(f"verification view {view!r} is unknown; choose one of {list(VIEWS)}")
    if view == "answer":
        answer = extract_answer(response) or "none"
        if style == "compact":
            return f"Q: {question}\nA: {answer}\nCheck:"
        return [{"role": "user", "content": f"{ANSWER_CHECK}\n\nProblem:\n{question}\n\nProposed final answer: {answer}"}]
    if style == "compact":
        return f"Q: {question}\nA: {response.strip()}\nCheck:"
    body = f"{VERIFY_INSTRUCTIONS}\n\nProblem:\n{question}\n\nCandidate solution:\n{response.strip()}"
    return [{"role": "user", "content": body}]


def compare_prompt(question: str, first: str, second: str, style: Style = "full") -> Prompt:
    """Ask which of two responses (with different final answers) is correct (verdict 1/2)."""
    _check_style(style)
    if style == "compact":
        return f"Q: {question}\nA1: {first.strip()}\nA2: {second.strip()}\nCompare:"
    body = (f"{COMPARE_INSTRUCTIONS}\n\nProblem:\n{question}\n\nResponse 1:\n{first.strip()}\n\n"
            f"Response 2:\n{second.strip()}")
    return [{"role": "user", "content": body}]


_MARKUP = re.compile(r"[*_`$]|\\textbf|\\text")
# "Verdict: 1", "**Verdict:** 0", "verdict = \boxed{1}", "Verdict: correct" ...
_VERDICT = re.compile(
    r"verdict\s*[:=\-]?\s*(?:is\s*)?[\[({]?\s*(?:\\boxed\s*\{\s*)?"
    r"(0|1|2|correct|incorrect|wrong|right|true|false|yes|no|response\s*[12])\b",
    re.IGNORECASE,
)
_WORDS = {"correct": 1, "right": 1, "true": 1, "yes": 1, "incorrect": 0, "wrong": 0, "false": 0, "no": 0}


def _verdicts(text: str) -> list[str]:
    return [m.group(1).lower() for m in _VERDICT.finditer(_MARKUP.sub("", text or ""))]


def parse_verification(text: str) -> Verdict:
    """The last `Verdict:` in the text as 0/1; anything else is unparsable (not a guess)."""
    for raw in reversed(_verdicts(text)):
        if raw in ("0", "1"):
            return Verdict(int(raw), "ok")
        if raw in _WORDS:
            return Verdict(_WORDS[raw], "ok")
        return Verdict(None, "unparsable")  # "Verdict: 2" in a 0/1 question
    return Verdict(None, "unparsable")


def parse_comparison(text: str) -> Verdict:
    """The last `Verdict:` as 1 or 2 (which response is correct); anything else is unparsable."""
    for raw in reversed(_verdicts(text)):
        raw = raw.replace(" ", "")
        if raw in ("1", "2", "response1", "response2"):
            return Verdict(int(raw[-1]), "ok")
        return Verdict(None, "unparsable")
    return Verdict(None, "unparsable")


def verdict_code(v: Verdict) -> int:
    """Storage code: the verdict value, or -1 for unparsable (score arrays are int8)."""
    return -1 if v.value is None else v.value
