"""Live sampling-based search for one request: k candidates, self-verification, tie-break.

    result = await search_and_select(pool.generate, messages, options=SearchOptions(k=16, verify=8),
                                     params=SamplingParams(temperature=1.0, max_tokens=512))
    result.text, result.candidates    # the selected response, and what it was chosen from

This is Verification@k run for real with the same selection code as the offline curves
(search.selection): scores count unparsable verdicts as 0, candidates without a final
answer are never selected while another has one, an optional preliminary round keeps the
best-scored few per answer, and a top group that disagrees on the answer plays k_tie
comparisons per matchup (half in each order, so position bias cancels); the candidate with
the most wins is selected. `verify=0` falls back to majority vote over final answers
(Consistency@k, a tied vote settled at random). Identical requests are never sent twice
(search.requests). `generate` is any async `(prompts, params) -> list[list[Completion]]`:
SamplerPool.generate, or `asyncio.to_thread` around an engine's generate.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

import numpy as np

from common.sampling import Completion, Generate, Prompt, SamplingParams, user_text
from search.requests import generate_each
from search.selection import (
    SelectionOptions,
    matchups,
    preliminary_keep,
    shortlist,
    tie_plan,
    tie_winner,
    verdict_score,
)
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
    k_tie: int = 4  # pairwise comparisons per matchup when the top group disagrees on the answer
    top_margin: float = 0.05  # candidates within this of the best score form the top group
    tie_break: bool = True  # False: the best-scored candidate, no comparisons
    preliminary: int = 0  # verdicts of a preliminary round (0: none); survivors get the rest
    preliminary_threshold: float = 0.2  # the preliminary round drops candidates scoring below this
    max_per_answer: int = 15  # the preliminary round keeps the best this many per answer
    style: Literal["full", "compact"] = "full"  # verifiers.selfverify prompt style
    verify_temperature: float = 1.0  # verdicts and comparisons are sampled at this temperature
    verify_max_tokens: int = 1024  # room for the rewrite-and-scan before the verdict

    def __post_init__(self):
        for name, low in (("k", 1), ("verify", 0), ("k_tie", 0), ("preliminary", 0), ("verify_max_tokens", 1)):
            if getattr(self, name) < low:
                raise ValueError(f"search.{name}={getattr(self, name)} must be >= {low}")
        if self.preliminary > self.verify:
            raise ValueError(f"search.preliminary={self.preliminary} must be <= search.verify={self.verify}")
        self.selection()  # validates the shared fields

    def selection(self) -> SelectionOptions:
        return SelectionOptions(top_margin=self.top_margin, tie_break=self.tie_break, k_tie=self.k_tie,
                                preliminary=self.preliminary > 0, n_preliminary=max(1, self.preliminary),
                                preliminary_threshold=self.preliminary_threshold,
                                max_per_answer=self.max_per_answer)

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
    score: float = 0.0  # share of 1 verdicts (unparsable ones count as 0)
    wins: int = 0  # comparisons won in the tie-break


@dataclass
class SearchResult:
    index: int  # of the selected candidate
    text: str
    answer: str | None
    method: Literal["majority", "unanimous_top", "best_score", "tie_break"]
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
    text = user_text(prompt)
    return text if text is not None else prompt[-1]["content"]


def _majority(cands: list[Candidate], rng: random.Random) -> int:
    """A member of the most common answer; a tied vote goes to a random tied answer."""
    votes = Counter(c.answer_id for c in cands if c.answer_id >= 0)
    if not votes:
        return 0
    best = max(votes.values())
    winner = rng.choice(sorted(a for a, n in votes.items() if n == best))
    return next(i for i, c in enumerate(cands) if c.answer_id == winner)


async def search_and_select(
    generate: Generate, prompt: Prompt, *, options: SearchOptions, params: SamplingParams,
    question: str | None = None,
) -> SearchResult:
    """Sample options.k candidates for `prompt` and select one by self-verification."""
    question = question if question is not None else question_of(prompt)
    spent = 0

    async def counted(prompts: list[Prompt], ns: list[int], p: SamplingParams, salt: int) -> list[list[Completion]]:
        nonlocal spent
        out = await generate_each(generate, prompts, ns, p, salt)
        spent += sum(c.completion_tokens for row in out for c in row)
        return out

    def result(i: int, method: str, comparisons: list) -> SearchResult:
        return SearchResult(i, cands[i].text, cands[i].answer, method, cands, comparisons, rows[i], spent)  # type: ignore[arg-type]

    (rows,) = await generate([prompt], replace(params, n=options.k))
    spent += sum(c.completion_tokens for c in rows)
    answers = [extract_answer(c.text) for c in rows]
    cands = [Candidate(c.text, a, cls) for c, a, cls in zip(rows, answers, group_answers(answers), strict=True)]
    if options.verify == 0:
        return result(_majority(cands, random.Random(params.seed)), "majority", [])

    sel = options.selection()
    ids = np.array([c.answer_id for c in cands])
    vparams = SamplingParams(temperature=options.verify_temperature, max_tokens=options.verify_max_tokens,
                             seed=params.seed)
    vprompts = [verify_prompt(question, c.text, options.style) for c in cands]

    async def add_verdicts(ns: list[int], salt: int) -> None:
        for cand, row in zip(cands, await counted(vprompts, ns, vparams, salt), strict=True):
            cand.verdicts += [verdict_code(parse_verification(c.text)) for c in row]

    prelim = None
    if sel.preliminary:
        await add_verdicts([options.preliminary] * len(cands), salt=1)
        prelim = verdict_score(np.array([c.verdicts.count(1) for c in cands]), options.preliminary)
        # the rest of the verdicts only for the preliminary round's survivors
        alive = preliminary_keep(ids, prelim, sel)
        await add_verdicts([options.verify - options.preliminary if a else 0 for a in alive], salt=100)
    else:
        await add_verdicts([options.verify] * len(cands), salt=1)
    for c in cands:
        c.score = float(verdict_score(c.verdicts.count(1), len(c.verdicts)))
    scores = np.array([c.score for c in cands])
    top, first, disagree = shortlist(ids, scores, sel, prelim)
    if not disagree:
        return result(int(first), "unanimous_top", [])
    if not sel.tie_break or sel.k_tie == 0:
        return result(int(first), "best_score", [])

    forward, backward = tie_plan(sel.k_tie)
    pairs = [(int(i), int(j)) for i, j in np.argwhere(matchups(top, ids))]
    orders = [(i, j, forward) for i, j in pairs] + [(j, i, backward) for i, j in pairs]
    prompts = [compare_prompt(question, cands[i].text, cands[j].text, options.style) for i, j, _ in orders]
    outs = await counted(prompts, [n for _, _, n in orders], vparams, salt=200)
    wins = np.zeros((len(cands), len(cands)), np.int64)
    comparisons = []
    for (i, j, _), row in zip(orders, outs, strict=True):
        for out in row:
            v = parse_comparison(out.text)
            comparisons.append((i, j, verdict_code(v)))
            if v.ok:  # an unparsable comparison counts for nobody
                winner, loser = (i, j) if v.value == 1 else (j, i)
                wins[winner, loser] += 1
    for n, c in enumerate(cands):
        c.wins = int(wins[n].sum())
    return result(int(tie_winner(top, wins, scores)), "tie_break", comparisons)
