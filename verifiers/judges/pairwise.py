"""A pairwise LLM judge: both orders of every pair, turned into per-response Bradley-Terry scores.

For each group (the responses to one instruction) every unordered pair is judged twice,
once as (A, B) and once as (B, A), which cancels the judge's position bias; the wins go
into a Bradley-Terry fit whose log-strengths are the scores. The engine is any async
`Generate` (the SamplerPool, or search.engines' OpenAI engine for a served judge). An
unparsable verdict counts for neither side and is recorded per item (`unparsable` in
the verdict's detail); a response none of whose comparisons parsed gets a failed verdict.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from common.sampling import Generate, Prompt, SamplingParams
from verifiers.judges.base import JudgeItem, Verdict, check_verdicts

PAIR_PROMPT = (
    "Which response answers the instruction better? Reply with \"A\" or \"B\" only.\n\n"
    "Instruction: {instruction}\n\nResponse A: {a}\n\nResponse B: {b}\n\nBetter response:"
)
VERDICT = re.compile(r"^\W*(?:response\s+)?([AB])\b", re.IGNORECASE)
CHOICE_REGEX = "[AB]"  # a constrained verdict: one letter, always parsable


def parse_choice(text: str) -> int | None:
    """0 for A, 1 for B, None when the verdict is not one of them."""
    m = VERDICT.match(text.strip())
    return None if m is None else "AB".index(m.group(1).upper())


def bradley_terry(n: int, wins: np.ndarray, iters: int = 200) -> np.ndarray:
    """Log-strengths from a wins matrix (wins[i, j] = times i beat j), by the MM algorithm.

    A half win is added to every pair so a response that won (or lost) everything still has
    a finite strength; scores are centred to mean 0.
    """
    w = wins + 0.5 * (1 - np.eye(n))
    games = w + w.T
    p = np.ones(n)
    for _ in range(iters):
        denom = (games / (p[:, None] + p[None, :])).sum(1)
        p = w.sum(1) / denom
        p /= p.sum()
    s = np.log(p)
    return s - s.mean()


class PairwiseJudge:
    name = "pairwise"
    # Scores are relative to the group judged together: a lone response scores 0 whatever it says,
    # so measurement compares responses head to head (thinking.loop) instead of scores across calls.
    comparative = True

    def __init__(self, generate: Generate, template: str = PAIR_PROMPT, max_tokens: int = 4,
                 temperature: float = 0.0, seed: int | None = 0, chat: bool = False, regex: str | None = None):
        """`chat`: each prompt is one user message (a chat model's template applies); `regex`:
        the verdict decoded under it (e.g. CHOICE_REGEX, so every verdict parses), for engines
        that constrain (the pool's transformers and vllm; not every OpenAI-compatible server)."""
        if "{a}" not in template or "{b}" not in template or "{instruction}" not in template:
            raise ValueError("judge.kwargs.template must contain {instruction}, {a} and {b}")
        self.generate, self.template, self.chat = generate, template, chat
        self.params = SamplingParams(n=1, temperature=temperature, max_tokens=max_tokens, seed=seed, regex=regex)

    async def score(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        groups: dict[str, list[int]] = defaultdict(list)
        for i, it in enumerate(items):
            groups[it.group].append(i)
        jobs: list[tuple[str, int, int]] = []  # (group, first shown, second shown) as item indices
        for g, idx in groups.items():
            for a, b in itertools.combinations(idx, 2):
                jobs += [(g, a, b), (g, b, a)]
        texts = [self.template.format(instruction=items[a].instruction, a=items[a].response, b=items[b].response)
                 for _, a, b in jobs]
        prompts: list[Prompt] = [[{"role": "user", "content": t}] for t in texts] if self.chat else list(texts)
        rows = await self.generate(prompts, self.params) if prompts else []
        local = {i: k for idx in groups.values() for k, i in enumerate(idx)}
        wins = {g: np.zeros((len(idx), len(idx))) for g, idx in groups.items()}
        parsed, unparsable = defaultdict(int), defaultdict(int)
        for (g, a, b), row in zip(jobs, rows, strict=True):
            choice = parse_choice(row[0].text)
            if choice is None:
                unparsable[a] += 1
                unparsable[b] += 1
                continue
            parsed[a] += 1
            parsed[b] += 1
            winner, loser = (a, b) if choice == 0 else (b, a)
            wins[g][local[winner], local[loser]] += 1
        out: list[Verdict] = [Verdict(None, False, "")] * len(items)
        for g, idx in groups.items():
            scores = bradley_terry(len(idx), wins[g]) if len(idx) > 1 else np.zeros(1)
            for k, i in enumerate(idx):
                if len(idx) > 1 and parsed[i] == 0:
                    out[i] = Verdict(None, False, "unparsable verdict", {"unparsable": unparsable[i]})
                else:
                    v = Verdict.of(float(scores[k]), comparisons=parsed[i], unparsable=unparsable[i])
                    out[i] = v if math.isfinite(scores[k]) else Verdict(None, False, "nan score")
        return check_verdicts(out, items, self.name)
