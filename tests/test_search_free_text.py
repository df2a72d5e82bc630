"""The served search (search/serve/service_search.py) on free-text verdicts, the opt-in path,
against a rule-following oracle: verified answers over the majority, comparisons that break a
disagreeing top group, no request sent twice, the live search choosing what the offline replay
chooses, and a tied vote settled at random. Constrained verdicts, the default: tests/test_service_search.py."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from _arith_oracle import ArithOracle, Recorder

from common.sampling import Completion, SamplingParams
from search.scored_pool import ScoredPool
from search.serve.service_search import SearchOptions, search_and_select
from search.strategies import Draws, get_strategy
from verifiers.math_answers import extract_answer

# The oracles write free-text verdicts: the opt-in path, scored by the share of 1s, Verification@k.
FREE_TEXT = dict(strategy="verification", verdict="parsed")
QUESTION = "Ann has 7 pens, gets 5, loses 3. How many?"
RIGHT, WRONG = " 7+5=12. 12-3=9. Answer: 9", " 7+5=12. 12-3=8. Answer: 8"


def test_search_selects_the_verified_answer_over_the_majority():
    oracle = ArithOracle([WRONG, WRONG, RIGHT, WRONG])
    res = asyncio.run(search_and_select(oracle.generate, f"Q: {QUESTION}\nA:", question=QUESTION,
                                        options=SearchOptions(k=4, verify=3, style="compact", **FREE_TEXT),
                                        params=SamplingParams(max_tokens=32)))
    assert res.answer == "9" and res.method == "unanimous_top"
    assert [c.score for c in res.candidates] == [0.0, 0.0, 1.0, 0.0]
    assert res.completion.text == RIGHT and res.completion_tokens == 4 + 4 * 3  # one token per fake sample
    assert "completion" not in res.to_dict() and len(res.to_dict()["candidates"]) == 4
    majority = asyncio.run(search_and_select(oracle.generate, f"Q: {QUESTION}\nA:", question=QUESTION,
                                             options=SearchOptions(k=4, verify=0, style="compact"),
                                             params=SamplingParams(max_tokens=32)))
    assert majority.answer == "8" and majority.method == "majority"


def test_search_breaks_a_disagreeing_top_group_with_comparisons():
    oracle = ArithOracle([WRONG, RIGHT, WRONG], verdict_for_all=1)  # the verifier passes everyone
    res = asyncio.run(search_and_select(oracle.generate, f"Q: {QUESTION}\nA:", question=QUESTION,
                                        options=SearchOptions(k=3, verify=2, k_tie=4, style="compact", **FREE_TEXT),
                                        params=SamplingParams(max_tokens=32)))
    assert res.method == "tie_break" and res.answer == "9"
    # k_tie comparisons per matchup (0-1 and 1-2), half in each order
    assert len(res.comparisons) == 8
    assert Counter((i, j) for i, j, _ in res.comparisons) == {(0, 1): 2, (1, 0): 2, (1, 2): 2, (2, 1): 2}
    assert res.candidates[1].wins == 8


def test_search_never_sends_the_same_request_twice():
    # two identical wrong candidates and repeated comparisons of one pair: on a seeded engine an
    # identical (prompt, seed) returns the same completion, so each must go out once (n summed)
    oracle = ArithOracle([WRONG, RIGHT, WRONG], verdict_for_all=1)
    rec = Recorder(oracle.generate)
    res = asyncio.run(search_and_select(rec.generate, f"Q: {QUESTION}\nA:", question=QUESTION,
                                        options=SearchOptions(k=3, verify=2, k_tie=6, style="compact", **FREE_TEXT),
                                        params=SamplingParams(max_tokens=32, seed=7)))
    keys = [(p, seed) for p, seed, _ in rec.requests]
    assert len(keys) == len(set(keys))
    assert len(res.comparisons) == 12 and all(len(c.verdicts) == 2 for c in res.candidates)


class Scripted:
    """Verdicts and comparisons by candidate text: the same verdicts for the live path and a pool."""

    def __init__(self, candidates: dict[str, int], beats: dict[str, int]):
        self.candidates, self.beats = candidates, beats  # text -> verdict; answer -> strength

    async def generate(self, prompts, params):
        texts = list(self.candidates)
        out = []
        for p in prompts:
            if p.endswith("A:"):
                out.append([Completion(texts[i % len(texts)], "stop", 1, 1) for i in range(params.n)])
                continue
            if p.endswith("Check:"):
                text = next(t for t in texts if p.split("\nA: ", 1)[1] == f"{t.strip()}\nCheck:")
                out.append([Completion(f"Verdict: {self.candidates[text]}", "stop", 1, 1)] * params.n)
                continue
            first, second = (extract_answer(x) for x in p.split("\nA1: ")[1].split("\nA2: "))
            won = 1 if self.beats.get(first, 0) >= self.beats.get(second, 0) else 2
            out.append([Completion(f"Verdict: {won}", "stop", 1, 1)] * params.n)
        return out


@pytest.mark.parametrize("gold", ["7", "9"])
@pytest.mark.parametrize("preliminary", [0, 1])
def test_live_search_and_offline_replay_choose_the_same_answer(gold, preliminary):
    cands = {" 4+5=9. Answer: 9": 1, " 4+4=8. Answer: 8": 1, " 4+5=9. So 9. Answer: 9": 0,
             " 3+4=7. Answer: 7": 1, " 4+5 is hard.": 1}
    script = Scripted(cands, beats={"7": 3, "9": 2, "8": 1})
    opts = SearchOptions(k=5, verify=2, k_tie=2, preliminary=preliminary, style="compact", **FREE_TEXT)
    live = asyncio.run(search_and_select(script.generate, f"Q: {QUESTION}\nA:", question=QUESTION,
                                         options=opts, params=SamplingParams(max_tokens=32)))
    assert live.method == "tie_break" and live.answer == "7"
    ids = [c.answer_id for c in live.candidates]
    answers = {c.answer_id: c.answer for c in live.candidates if c.answer_id >= 0}
    ok = [answers[a] == gold for a in range(len(answers))]
    record = {"id": "q", "answer_correct": ok,
              "candidates": [{"answer_id": c.answer_id, "correct": c.answer_id >= 0 and ok[c.answer_id],
                              # a preliminary drop-out got fewer verdicts live; the script's are constant
                              "verdicts": (c.verdicts * 2)[:2]} for c in live.candidates],
              "comparisons": [[ids[i], ids[j], w] for i, j, w in live.comparisons]}
    pool = ScoredPool.from_records([record])
    replay = get_strategy("verification_tie")(pool, Draws(pool, seeds=30), k=5, k_verif=2,
                                             options=opts.selection()).per_question[0]
    assert replay == float(live.answer == gold)


def test_search_options_reject_unknown_fields():
    with pytest.raises(ValueError, match="unknown search field"):
        SearchOptions.from_request({"k": 4, "verfy": 2})
    assert SearchOptions.from_request({"k": 4, "verify": 1, "return_candidates": True}).k == 4


def test_majority_fallback_settles_a_tied_vote_at_random_not_by_first_seen():
    oracle = ArithOracle([WRONG, RIGHT])
    picked = {asyncio.run(search_and_select(oracle.generate, f"Q: {QUESTION}\nA:", question=QUESTION,
                                            options=SearchOptions(k=2, verify=0, style="compact"),
                                            params=SamplingParams(max_tokens=32, seed=s))).answer
              for s in range(20)}
    assert picked == {"8", "9"}
