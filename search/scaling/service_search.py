"""Live sampling-based search for one request: k candidates, self-verification, tie-break.

    result = await search_and_select(pool.generate, messages, options=SearchOptions(k=16, verify=8),
                                     params=SamplingParams(temperature=1.0, max_tokens=512))
    result.text, result.candidates    # the selected response, and what it was chosen from

This is Verification@k run for real (the scaling job computes its curves from a stored
pool instead): the top group is every candidate within `top_margin` of the best mean
verdict, and when it disagrees on the final answer, `k_tie` pairwise comparisons are
spread round-robin over its cross-answer pairs, alternating which response comes first
(so position bias cancels); the candidate with the best win rate is selected. `verify=0`
falls back to majority vote over final answers (Consistency@k).
`generate` is any async `(prompts, params) -> list[list[Completion]]`: SamplerPool.generate,
or `asyncio.to_thread` around an engine's generate.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from common.sampling import Completion, Generate, Prompt, SamplingParams
from verifiers.math_answers import extract_answer, group_answers
from verifiers.selfverify import (
    compare_prompt,
    parse_comparison,
    parse_verification,
    verdict_code,
    verify_prompt,
)


@dataclass
class SearchOptions:
    k: int = 16  # candidates sampled
    verify: int = 8  # self-verification verdicts per candidate; 0 = majority vote only
    k_tie: int = 16  # pairwise comparisons when the top group disagrees on the answer
    top_margin: float = 0.05  # candidates within this of the best mean verdict form the top group
    style: Literal["full", "compact"] = "full"  # verifiers.selfverify prompt style
    verify_temperature: float = 1.0  # verdicts and comparisons are sampled at this temperature
    verify_max_tokens: int = 1024  # room for the rewrite-and-scan before the verdict

    def __post_init__(self):
        for name, low in (("k", 1), ("verify", 0), ("k_tie", 0), ("verify_max_tokens", 1)):
            if getattr(self, name) < low:
                raise ValueError(f"search.{name}={getattr(self, name)} must be >= {low}")
        if not 0 <= self.top_margin < 1:
            raise ValueError(f"search.top_margin={self.top_margin} must be in [0, 1)")

    @classmethod
    def from_request(cls, body: dict[str, Any]) -> SearchOptions:
        """From the chat-completions extension field, e.g. {"k": 16, "verify": 8}."""
        known = {f for f in cls.__dataclass_fields__} | {"return_candidates"}
        unknown = set(body) - known
        if unknown:
            raise ValueError(f"unknown search field(s) {sorted(unknown)}; known: {sorted(known)}")
        return cls(**{k: v for k, v in body.items() if k != "return_candidates"})


@dataclass
class Candidate:
    text: str
    answer: str | None
    answer_id: int  # equivalence class of the final answer; -1 = none
    verdicts: list[int] = field(default_factory=list)  # 1, 0, -1 (unparsable)
    score: float = -1.0  # mean parsable verdict; -1 when none parsed
    wins: int = 0
    games: int = 0


@dataclass
class SearchResult:
    index: int  # of the selected candidate
    text: str
    answer: str | None
    method: Literal["majority", "unanimous_top", "tie_break"]
    candidates: list[Candidate]
    comparisons: list[tuple[int, int, int]]  # (first, second, verdict 1|2|-1)
    completion: Completion | None = None  # the selected sample as the engine returned it
    completion_tokens: int = 0  # spent on candidates, verdicts and comparisons together

    def to_dict(self) -> dict[str, Any]:
        """Plain data for an HTTP response's `search` field (the selected completion left out)."""
        d = asdict(self)
        d.pop("completion")
        return d


def question_of(prompt: Prompt) -> str:
    """The text the verifier checks against: the prompt, or the last user message."""
    if isinstance(prompt, str):
        return prompt
    users = [m["content"] for m in prompt if m.get("role") == "user"]
    return users[-1] if users else prompt[-1]["content"]


def _majority(cands: list[Candidate]) -> int:
    votes = Counter(c.answer_id for c in cands if c.answer_id >= 0)
    if not votes:
        return 0
    best = max(votes.values())
    winner = next(a for a, n in votes.items() if n == best)  # first-seen answer among the tied
    return next(i for i, c in enumerate(cands) if c.answer_id == winner)


def tie_pairs(top: list[int], cands: list[Candidate], k_tie: int) -> list[tuple[int, int]]:
    """k_tie ordered pairs, round-robin over the top group's cross-answer pairs, orders alternating."""
    pairs = [(i, j) for i, j in itertools.combinations(top, 2) if cands[i].answer_id != cands[j].answer_id]
    out = []
    for r in range(k_tie):
        if not pairs:
            break
        i, j = pairs[r % len(pairs)]
        out.append((i, j) if (r // len(pairs)) % 2 == 0 else (j, i))
    return out


async def search_and_select(
    generate: Generate, prompt: Prompt, *, options: SearchOptions, params: SamplingParams,
    question: str | None = None,
) -> SearchResult:
    """Sample options.k candidates for `prompt` and select one by self-verification."""
    question = question if question is not None else question_of(prompt)
    spent = 0

    async def counted(prompts: list[Prompt], p: SamplingParams) -> list[list[Completion]]:
        nonlocal spent
        out = await generate(prompts, p)
        spent += sum(c.completion_tokens for row in out for c in row)
        return out

    def result(i: int, method: str, comparisons: list) -> SearchResult:
        return SearchResult(i, cands[i].text, cands[i].answer, method, cands, comparisons, rows[i], spent)  # type: ignore[arg-type]

    (rows,) = await counted([prompt], replace(params, n=options.k))
    answers = [extract_answer(c.text) for c in rows]
    cands = [Candidate(c.text, a, cls) for c, a, cls in zip(rows, answers, group_answers(answers), strict=True)]
    if options.verify == 0:
        return result(_majority(cands), "majority", [])

    vparams = SamplingParams(n=options.verify, temperature=options.verify_temperature,
                             max_tokens=options.verify_max_tokens, seed=params.seed)
    checks = await counted([verify_prompt(question, c.text, options.style) for c in cands], vparams)
    for cand, row in zip(cands, checks, strict=True):
        cand.verdicts = [verdict_code(parse_verification(c.text)) for c in row]
        valid = [v for v in cand.verdicts if v >= 0]
        cand.score = sum(valid) / len(valid) if valid else -1.0
    best = max(c.score for c in cands)
    top = [i for i, c in enumerate(cands) if c.score >= best - options.top_margin - 1e-9]
    if len({cands[i].answer_id for i in top}) == 1 or options.k_tie == 0:
        return result(max(top, key=lambda t: cands[t].score), "unanimous_top", [])

    pairs = tie_pairs(top, cands, options.k_tie)
    prompts = [compare_prompt(question, cands[i].text, cands[j].text, options.style) for i, j in pairs]
    outs = await counted(prompts, replace(vparams, n=1))
    comparisons = []
    for (i, j), (out,) in zip(pairs, outs, strict=True):
        v = parse_comparison(out.text)
        comparisons.append((i, j, verdict_code(v)))
        if v.ok:  # an unparsable comparison counts for nobody
            cands[i].games += 1
            cands[j].games += 1
            (cands[i] if v.value == 1 else cands[j]).wins += 1
    i = max(top, key=lambda t: (cands[t].wins / max(cands[t].games, 1), cands[t].score, -t))
    return result(i, "tie_break", comparisons)
