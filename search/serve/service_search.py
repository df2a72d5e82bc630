"""Live sampling-based search for one request: k candidates, verdicts, one strategy's choice.

    result = await search_and_select(pool.generate, messages, options=SearchOptions(k=8),
                                     params=SamplingParams(temperature=0.7, max_tokens=192))
    result.text, result.strategy, result.candidates    # the selected response, how, and from what

The strategies are the offline curves' (search.strategies), run for real on one question:
- `consistency`: majority vote over final answers (a tied vote settled at random); no verdicts;
- `weighted_best_of_n` (the default): the answer whose candidates' scores sum highest, the
  vote of search.strategies.base.vote, and of that answer its best-scored candidate;
- `best_of_n`: the best-scored candidate (ties at random);
- `verification`: Verification@k with the selection code the curves replay (search.selection):
  candidates without a final answer lose to any with one, an optional preliminary round, and a
  top group that disagrees on the answer plays k_tie comparisons per matchup (half in each order).

Verdicts and comparisons are sampled by search.verdicts, the scaling job's code: by default
`constrained` (the verdict token alone under a regex, so it always parses) and scored by its
probability P(1); `reasoned` writes a check first; free-text `parsed` verdicts are opt-in. A
constrained verdict's P(1) depends on the prompt alone, so more than one per candidate buys
nothing under probability scoring and is refused. `verifier` (SearchResult) may be another
model's generate: the trained verifier beside the sampler. Identical requests are never sent
twice (search.requests). `generate` is any async `(prompts, params) -> list[list[Completion]]`.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, get_args

import numpy as np

from common.sampling import Completion, Generate, Prompt, SamplingParams, user_text
from search.selection import (
    SelectionOptions,
    matchups,
    preliminary_keep,
    shortlist,
    tie_plan,
    tie_winner,
    verdict_score,
)
from search.strategies.base import vote
from search.verdicts import sample_verdicts
from verifiers.math_answers import extract_answer, group_answers
from verifiers.selfverify import Style, View, compare_prompt, question_in, verify_prompt
from verifiers.verdicts import Mode, check_mode

Strategy = Literal["consistency", "weighted_best_of_n", "best_of_n", "verification"]
STRATEGIES: tuple[str, ...] = get_args(Strategy)
Score = Literal["probability", "verdicts"]
Method = Literal["majority", "weighted_vote", "best_score", "unanimous_top", "tie_break"]


@dataclass
class SearchOptions:
    k: int = 8  # candidates sampled
    strategy: Strategy | None = None  # None: weighted_best_of_n, or consistency when verify=0
    verify: int | None = None  # verdicts per candidate; None: 1 (0 for consistency)
    verdict: Mode = "constrained"  # how verdicts are decoded (verifiers.verdicts); "parsed" = free text
    score: Score | None = None  # a candidate's score: mean P(1) ("probability"), or its share of 1 verdicts;
    # None: probability, or verdicts for parsed ones (free text has no probability)
    k_tie: int = 4  # verification: comparisons per matchup when the top group disagrees on the answer
    top_margin: float = 0.05  # verification: candidates within this of the best score form the top group
    tie_break: bool = True  # verification: False selects the best-scored candidate, no comparisons
    preliminary: int = 0  # verification: verdicts of a preliminary round (0: none); survivors get the rest
    preliminary_threshold: float = 0.2  # the preliminary round drops candidates scoring below this
    max_per_answer: int = 15  # the preliminary round keeps the best this many per answer
    style: Style = "full"  # verifiers.selfverify prompt style
    verify_view: View = "solution"  # what a verdict sees of a candidate (the shipped verifier adapter's)
    verify_temperature: float = 1.0  # verdicts and comparisons are sampled at this temperature
    # tokens of a written check (verdict parsed or reasoned); a constrained verdict takes a handful
    verify_max_tokens: int = 160
    deadline_s: float | None = None  # the server answers 504 and stops the search after this long

    def __post_init__(self):
        if self.strategy is None:
            self.strategy = "consistency" if self.verify == 0 else "weighted_best_of_n"
        if self.strategy not in STRATEGIES:
            raise ValueError(f"search.strategy={self.strategy!r} is unknown; choose one of {list(STRATEGIES)}")
        check_mode(self.verdict)
        if self.verify is None:
            self.verify = 0 if self.strategy == "consistency" else 1
        if self.score is None:
            self.score = "verdicts" if self.verdict == "parsed" else "probability"
        for name, low in (("k", 1), ("verify", 0), ("k_tie", 0), ("preliminary", 0), ("verify_max_tokens", 1)):
            if getattr(self, name) < low:
                raise ValueError(f"search.{name}={getattr(self, name)} must be >= {low}")
        if self.strategy == "consistency" and self.verify:
            raise ValueError("search.strategy=consistency votes over answers and samples no verdicts: "
                             "drop search.verify (or choose a strategy that scores candidates)")
        if self.strategy != "consistency" and self.verify == 0:
            raise ValueError(f"search.strategy={self.strategy} scores candidates by verdicts: search.verify "
                             "must be >= 1 (or choose strategy=consistency)")
        if self.score not in get_args(Score):
            raise ValueError(f"search.score={self.score!r} must be 'probability' or 'verdicts'")
        if self.score == "probability" and self.verdict == "parsed":
            raise ValueError("search.verdict=parsed verdicts are free text and have no probability: "
                             "use score=verdicts, or verdict=constrained")
        if self.score == "probability" and self.verdict == "constrained" and self.verify > 1:
            raise ValueError(f"search.verify={self.verify}: a constrained verdict's P(1) depends on the prompt "
                             "alone, so every verdict of a candidate scores the same; use verify=1, "
                             "verdict=reasoned (a written check first, sampled at verify_temperature), or "
                             "score=verdicts (sampled 0/1 verdicts)")
        if self.preliminary > self.verify:
            raise ValueError(f"search.preliminary={self.preliminary} must be <= search.verify={self.verify}")
        if self.preliminary and self.strategy != "verification":
            raise ValueError("search.preliminary is a round of strategy=verification")
        if self.deadline_s is not None and self.deadline_s <= 0:
            raise ValueError(f"search.deadline_s={self.deadline_s} must be > 0 (or left out: no deadline)")
        self.selection()  # validates the shared fields

    def selection(self) -> SelectionOptions:
        return SelectionOptions(top_margin=self.top_margin, tie_break=self.tie_break, k_tie=self.k_tie,
                                preliminary=self.preliminary > 0, n_preliminary=max(1, self.preliminary),
                                preliminary_threshold=self.preliminary_threshold,
                                max_per_answer=self.max_per_answer, score=str(self.score))

    @classmethod
    def from_request(cls, body: dict[str, Any]) -> SearchOptions:
        """From the chat-completions extension field, e.g. {"k": 8, "strategy": "weighted_best_of_n"}."""
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
    probabilities: list[float | None] = field(default_factory=list)  # P(1) of each verdict (None: parsed)
    score: float = 0.0  # mean P(1), or share of 1 verdicts (unparsable ones count as 0)
    votes: int = 0  # candidates with this final answer (itself included; 0 without an answer)
    answer_score: float = 0.0  # summed score of this answer's candidates: what weighted Best-of-N compares
    wins: int = 0  # comparisons won in verification's tie-break


@dataclass
class SearchResult:
    index: int  # of the selected candidate
    text: str
    answer: str | None
    strategy: Strategy
    method: Method  # how the strategy decided
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
    """The text the verifier checks against: the prompt, or the last user message (the scaling job's
    answer instruction taken off, so a served verdict sees what the offline job's does)."""
    text = user_text(prompt)
    return question_in(text if text is not None else prompt[-1]["content"])


def majority(cands: list[Candidate], rng: random.Random) -> int:
    """A member of the most common answer; a tied vote goes to a random tied answer."""
    votes = Counter(c.answer_id for c in cands if c.answer_id >= 0)
    if not votes:
        return 0
    best = max(votes.values())
    winner = rng.choice(sorted(a for a, n in votes.items() if n == best))
    return next(i for i, c in enumerate(cands) if c.answer_id == winner)


def weighted_vote(cands: list[Candidate], seed: int | None) -> int:
    """The offline weighted Best-of-N's vote (search.strategies.base.vote) on one question; of the
    winning answer, its best-scored candidate (the lowest index on ties)."""
    ids = np.array([[[c.answer_id for c in cands]]])
    weights = np.maximum(np.array([[[c.score for c in cands]]]), 0.0)
    chosen, cast = vote(ids, weights, max(int(ids.max()) + 1, 1), np.random.default_rng(seed))
    if not cast[0, 0]:  # nobody has a final answer
        return best_scored(cands, random.Random(seed))
    members = [i for i, c in enumerate(cands) if c.answer_id == chosen[0, 0]]
    return max(members, key=lambda i: (cands[i].score, -i))


def best_scored(cands: list[Candidate], rng: random.Random) -> int:
    """The best-scored candidate, a tie settled at random (as offline Best-of-N averages over ties)."""
    best = max(c.score for c in cands)
    return rng.choice([i for i, c in enumerate(cands) if c.score == best])


def candidate_score(cand: Candidate, score: Score) -> float:
    if score == "verdicts":
        return float(verdict_score(cand.verdicts.count(1), len(cand.verdicts)))
    if not cand.probabilities or any(p is None for p in cand.probabilities):
        raise RuntimeError("a verdict came back without the logprobs its probability needs: the engine "
                           "must return top logprobs for a constrained verdict")
    return float(np.mean(cand.probabilities))


def tally(cands: list[Candidate]) -> None:
    """Each candidate's votes and its answer's summed score (zero for no answer)."""
    counts = Counter(c.answer_id for c in cands)
    sums: dict[int, float] = {}
    for c in cands:
        sums[c.answer_id] = sums.get(c.answer_id, 0.0) + max(c.score, 0.0)
    for c in cands:
        c.votes, c.answer_score = (counts[c.answer_id], sums[c.answer_id]) if c.answer_id >= 0 else (0, 0.0)


async def search_and_select(
    generate: Generate, prompt: Prompt, *, options: SearchOptions, params: SamplingParams,
    question: str | None = None, verifier: Generate | None = None,
) -> SearchResult:
    """Sample options.k candidates for `prompt` and select one by options.strategy.

    `verifier`: the generate of verdicts and comparisons (another model's); default `generate`."""
    question = question if question is not None else question_of(prompt)
    verifier = verifier or generate
    spent = 0

    def counting(gen: Generate) -> Generate:
        async def counted(prompts: list[Prompt], p: SamplingParams) -> list[list[Completion]]:
            nonlocal spent
            out = await gen(prompts, p)
            spent += sum(c.completion_tokens for row in out for c in row)
            return out
        return counted

    def result(i: int, method: Method, comparisons: list) -> SearchResult:
        tally(cands)
        return SearchResult(i, cands[i].text, cands[i].answer, options.strategy, method, cands,  # type: ignore[arg-type]
                            comparisons, rows[i], spent)

    (rows,) = await counting(generate)([prompt], replace(params, n=options.k))
    answers = [extract_answer(c.text) for c in rows]
    cands = [Candidate(c.text, a, cls) for c, a, cls in zip(rows, answers, group_answers(answers), strict=True)]
    rng = random.Random(params.seed)
    if options.strategy == "consistency":
        return result(majority(cands, rng), "majority", [])

    judge = counting(verifier)
    vparams = SamplingParams(temperature=options.verify_temperature, max_tokens=options.verify_max_tokens,
                             seed=params.seed)
    vprompts = [verify_prompt(question, c.text, options.style, options.verify_view) for c in cands]

    async def add_verdicts(ns: list[int], salt: int) -> None:
        scored = await sample_verdicts(judge, vprompts, ns, vparams, mode=options.verdict, kind="verify", salt=salt)
        for cand, row in zip(cands, scored, strict=True):
            cand.verdicts += [code for code, _ in row]
            cand.probabilities += [p for _, p in row]

    sel = options.selection()
    ids = np.array([c.answer_id for c in cands])
    prelim = None
    if sel.preliminary:
        await add_verdicts([options.preliminary] * len(cands), salt=1)
        prelim = np.array([candidate_score(c, options.score) for c in cands])  # type: ignore[arg-type]
        alive = preliminary_keep(ids, prelim, sel)  # the rest of the verdicts only for its survivors
        await add_verdicts([options.verify - options.preliminary if a else 0 for a in alive], salt=100)  # type: ignore[operator]
    else:
        await add_verdicts([options.verify] * len(cands), salt=1)  # type: ignore[list-item]
    for c in cands:
        c.score = candidate_score(c, options.score)  # type: ignore[arg-type]
    if options.strategy == "weighted_best_of_n":
        return result(weighted_vote(cands, params.seed), "weighted_vote", [])
    if options.strategy == "best_of_n":
        return result(best_scored(cands, rng), "best_score", [])

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
    outs = await sample_verdicts(judge, prompts, [n for _, _, n in orders], vparams, mode=options.verdict,
                                 kind="compare", salt=200)
    wins = np.zeros((len(cands), len(cands)), np.int64)
    comparisons = []
    for (i, j, _), row in zip(orders, outs, strict=True):
        for code, _ in row:
            comparisons.append((i, j, code))
            if code in (1, 2):  # an unparsable comparison counts for nobody
                winner, loser = (i, j) if code == 1 else (j, i)
                wins[winner, loser] += 1
    for n, c in enumerate(cands):
        c.wins = int(wins[n].sum())
    return result(int(tie_winner(top, wins, scores)), "tie_break", comparisons)
