"""A programmatic judge for verifiable instructions: the response's final answer against the reference.

Score 1.0 when the last number in the response equals the reference, else 0.0. A response
with no number is a wrong answer (score 0.0), not a judge failure; an item without a
reference is a failure of the caller, recorded as such.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from verifiers.judges.base import JudgeItem, Verdict, check_verdicts

NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def final_number(text: str) -> str | None:
    found = NUMBER.findall(text)
    return found[-1] if found else None


class ProgrammaticJudge:
    name = "programmatic"

    def __init__(self, mode: str = "last_number"):
        if mode not in ("last_number", "exact"):
            raise ValueError(f"judge.kwargs.mode={mode!r} is unknown; choose 'last_number' or 'exact'")
        self.mode = mode

    def score_one(self, item: JudgeItem) -> Verdict:
        if item.reference is None:
            return Verdict(None, False, "no reference answer for a programmatic judge")
        got = final_number(item.response) if self.mode == "last_number" else item.response.strip()
        return Verdict.of(1.0 if got is not None and got == item.reference.strip() else 0.0, answer=got)

    async def score(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        return check_verdicts([self.score_one(i) for i in items], items, self.name)
