"""An own TPO judge, named in a config as `judge.kind: examples.judges:ShortCorrectJudge`.

A judge is a class with `name` and `async score(items) -> list[Verdict]`, one verdict per
item, in order. It sees the instruction, the response (never the thought) and the reference
answer when the instructions have one. Its constructor's keyword arguments come from
`judge.kwargs`, checked against the type hints below before the job starts; a parameter named
`generate` would receive the judge LLM (judge.checkpoint's pool or judge.base_url's server).

    python -m ray_jobs.tpo --config configs/tpo-demo.yaml judge.kind=examples.judges:ShortCorrectJudge \\
        judge.kwargs.per_char=0.002
"""

from __future__ import annotations

from collections.abc import Sequence

from verifiers.judges import JudgeItem, Verdict
from verifiers.judges.programmatic import final_number


class ShortCorrectJudge:
    """1 for the right final number, less `per_char` for every character of the response: of two
    right answers the shorter wins, so DPO learns to answer without padding."""

    name = "short-correct"

    def __init__(self, per_char: float = 0.001):
        if per_char < 0:
            raise ValueError(f"judge.kwargs.per_char={per_char} must be >= 0")
        self.per_char = per_char

    async def score(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        out = []
        for item in items:
            if item.reference is None:  # a failed verdict, kept and counted, never a silent 0
                out.append(Verdict(None, False, "no reference answer"))
                continue
            right = final_number(item.response) == item.reference.strip()
            out.append(Verdict.of(float(right) - self.per_char * len(item.response), right=right))
        return out
