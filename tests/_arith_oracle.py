"""A rule-following sampler for the scaling and served-search tests: scripted candidates, and
verdicts that recompute each arithmetic question's answer."""

from __future__ import annotations

import re

from common.sampling import Completion, SamplingParams
from verifiers.math_answers import extract_answer


class ArithOracle:
    """A rule-following sampler for the compact prompts: scripted candidates, and a verifier
    that recomputes the question's answer. It exercises the selection logic where a tiny
    model's noise would hide it; `calls` counts generated completions."""

    def __init__(self, candidates: list[str], verdict_for_all: int | None = None):
        self.candidates, self.verdict_for_all, self.calls = candidates, verdict_for_all, 0

    @staticmethod
    def truth(prompt: str) -> str:
        nums = [int(x) for x in re.findall(r"-?\d+", prompt.split("\n")[0])]
        words = prompt.split("\n")[0]
        value = nums[0]
        for clause, n in zip(re.split(r", ", words)[1:], nums[1:], strict=False):
            value += -n if re.match(r"(loses|sells|gives away|eats)", clause) else n
        return str(value)

    def complete(self, prompt: str, i: int) -> str:
        gold = self.truth(prompt)
        if prompt.endswith("A:"):
            return self.candidates[i % len(self.candidates)]
        if prompt.endswith("Check:"):
            if self.verdict_for_all is not None:
                return f"Verdict: {self.verdict_for_all}"
            return f"Verdict: {int(extract_answer(prompt.split('A: ')[1]) == gold)}"
        first = prompt.split("\nA1: ")[1].split("\nA2: ")[0]
        return f"Verdict: {1 if extract_answer(first) == gold else 2}"

    async def generate(self, prompts, params: SamplingParams) -> list[list[Completion]]:
        self.calls += len(prompts) * params.n
        return [[Completion(self.complete(p, i), "stop", 1, 1) for i in range(params.n)] for p in prompts]


class Recorder:
    """Wraps a generate and records every request as (prompt, seed, n)."""

    def __init__(self, generate):
        self.inner, self.requests = generate, []

    async def generate(self, prompts, params):
        self.requests += [(p, params.seed, params.n) for p in prompts]
        return await self.inner(prompts, params)
