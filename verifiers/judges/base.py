"""The judge interface: score a batch of (instruction, response) items.

The judges import this module; the factory by name lives a layer up, in
verifiers/judges/registry.py, so that no judge and its interface import each other.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class JudgeItem:
    """What a judge may see. No thought field, on purpose: the judge scores the response alone."""

    instruction: str
    response: str
    reference: str | None = None  # a gold answer, for programmatic judges of verifiable instructions
    group: str = ""  # items of one instruction share a group (pairwise judges compare within it)

    def __post_init__(self):
        if not isinstance(self.response, str):
            raise TypeError(f"JudgeItem.response must be the response text (str), got {type(self.response).__name__}; "
                            "pass the parsed response, never a whole output with its thought")


@dataclass(frozen=True)
class Verdict:
    score: float | None  # None when the judge failed on this item
    ok: bool
    error: str = ""  # "unparsable verdict", "nan score", ... when not ok
    detail: dict[str, Any] | None = None

    @staticmethod
    def of(score: float, **detail: Any) -> Verdict:
        """A score, checked: NaN/inf is recorded as a failed verdict, never passed on as a number."""
        if score is None or not math.isfinite(score):
            return Verdict(None, False, "nan score" if score is not None else "no score", detail or None)
        return Verdict(float(score), True, "", detail or None)


class Judge(Protocol):
    name: str

    async def score(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        """One verdict per item, in order."""
        ...


def check_verdicts(verdicts: Sequence[Verdict], items: Sequence[JudgeItem], source: str) -> list[Verdict]:
    if len(verdicts) != len(items):
        raise RuntimeError(f"judge {source} returned {len(verdicts)} verdicts for {len(items)} items")
    return list(verdicts)
