"""The served search's strategies (search/serve/service_search.py) on constrained verdicts: each
picks what the offline strategy picks on the same candidates and verdicts, verdicts come from the
verifier when one is given, and requests that would waste work are refused."""

from __future__ import annotations

import asyncio
import math

import pytest

from common.sampling import Completion, SamplingParams
from search.scored_pool import ScoredPool
from search.serve.service_search import SearchOptions, search_and_select
from search.strategies import Draws, get_strategy
from verifiers.selfverify import answer_prompt

QUESTION = "Ann has 7 pens, gets 5, loses 3. How many?"


def answer(text: str) -> str:
    return f"Working. The answer is \\boxed{{{text}}}."


class ConstrainedJudge:
    """Candidates in turn; a constrained verdict (params.regex) answers the choice the regex allows
    with P(1) = `p_right[candidate]`, in the logprobs shape engines return. `requests` records
    (kind, n) per prompt."""

    def __init__(self, candidates: list[str], p_right: dict[str, float]):
        self.candidates, self.p_right, self.requests = candidates, p_right, []

    async def generate(self, prompts, params: SamplingParams) -> list[list[Completion]]:
        out = []
        for p in prompts:
            if params.regex is None:
                self.requests.append(("candidate", params.n))
                out.append([Completion(self.candidates[i % len(self.candidates)], "stop", 1, 5)
                            for i in range(params.n)])
                continue
            self.requests.append(("verdict", params.n))
            assert params.regex == " [01]" and params.max_tokens <= 8  # a verdict is a handful of tokens
            user = p[0]["content"]
            prob = next(v for t, v in self.p_right.items() if f"Candidate solution:\n{t}" in user)
            top = [{"token": "1", "logprob": math.log(prob)}, {"token": "0", "logprob": math.log(1 - prob)}]
            pick = top[0] if prob >= 0.5 else top[1]
            out.append([Completion(f" {pick['token']}", "stop", 1, 2, logprobs=[pick | {"top_logprobs": top}])
                        for _ in range(params.n)])
        return out


# Three say 8, two say 9; the verifier likes one of the 9s best and the 8s little.
CANDIDATES = [answer("8"), answer("9"), answer("8"), answer("9"), answer("8")]
P_RIGHT = {answer("8"): 0.3, answer("9"): 0.8}


def run(options: SearchOptions, judge: ConstrainedJudge, verifier=None, seed: int = 0):
    return asyncio.run(search_and_select(judge.generate, answer_prompt(QUESTION), options=options,
                                         params=SamplingParams(max_tokens=64, seed=seed), verifier=verifier))


def test_the_default_is_weighted_best_of_n_with_one_constrained_verdict_scored_by_probability():
    opts = SearchOptions.from_request({"k": 5})
    assert (opts.strategy, opts.verify, opts.verdict, opts.score) == ("weighted_best_of_n", 1, "constrained",
                                                                      "probability")
    judge = ConstrainedJudge(CANDIDATES, P_RIGHT)
    res = run(opts, judge)
    # majority says 8 (3 votes x 0.3 = 0.9); the weighted vote says 9 (2 x 0.8 = 1.6)
    assert res.answer == "9" and res.strategy == "weighted_best_of_n" and res.method == "weighted_vote"
    assert res.index == 1  # of the winning answer's equally scored candidates, the first
    assert [c.score for c in res.candidates] == pytest.approx([0.3, 0.8, 0.3, 0.8, 0.3])
    assert [c.votes for c in res.candidates] == [3, 2, 3, 2, 3]
    assert [c.answer_score for c in res.candidates] == pytest.approx([0.9, 1.6, 0.9, 1.6, 0.9])
    # one request per distinct candidate text (identical ones go out once, n summed)
    assert sorted(judge.requests) == [("candidate", 5), ("verdict", 2), ("verdict", 3)]
    assert res.completion_tokens == 5 * 5 + 5 * 2


def test_each_strategy_picks_what_its_offline_curve_picks_on_the_same_verdicts():
    judge = ConstrainedJudge(CANDIDATES, P_RIGHT)
    consistency = run(SearchOptions(k=5, strategy="consistency"), judge)
    best = run(SearchOptions(k=5, strategy="best_of_n"), judge)
    verification = run(SearchOptions(k=5, strategy="verification"), judge)
    assert consistency.answer == "8" and consistency.method == "majority"
    assert best.answer == "9" and best.index in (1, 3)
    assert verification.answer == "9" and verification.method == "unanimous_top"
    weighted = run(SearchOptions(k=5), judge)
    for gold in ("8", "9"):  # offline, with either answer right: accuracy 1 exactly where live picked gold
        ids = [c.answer_id for c in weighted.candidates]
        ok = [next(c.answer for c in weighted.candidates if c.answer_id == a) == gold for a in range(max(ids) + 1)]
        record = {"id": "q", "answer_correct": ok,
                  "candidates": [{"answer_id": c.answer_id, "correct": ok[c.answer_id], "verdicts": c.verdicts,
                                  "verdict_probs": c.probabilities} for c in weighted.candidates],
                  "comparisons": []}
        pool = ScoredPool.from_records([record], score="probability")
        draws = Draws(pool, seeds=5)
        for live in (weighted, best, consistency):
            offline = get_strategy(live.strategy)(pool, draws, k=5, k_verif=None, options=SearchOptions(
                k=5).selection()).per_question[0]
            assert offline == float(live.answer == gold), (live.strategy, gold)


def test_verdicts_come_from_the_verifier_when_one_is_given():
    sampler = ConstrainedJudge(CANDIDATES, {answer("8"): 0.9, answer("9"): 0.1})  # would pick 8
    verifier = ConstrainedJudge(CANDIDATES, P_RIGHT)
    res = run(SearchOptions(k=5, strategy="best_of_n"), sampler, verifier=verifier.generate)
    assert res.answer == "9"
    assert {kind for kind, _ in sampler.requests} == {"candidate"}
    assert {kind for kind, _ in verifier.requests} == {"verdict"}


def test_a_verdict_without_logprobs_is_an_error_not_a_zero_score():
    class NoLogprobs(ConstrainedJudge):
        async def generate(self, prompts, params):
            rows = await super().generate(prompts, params)
            return [[Completion(c.text, c.finish_reason, 1, 1) for c in row] for row in rows]

    with pytest.raises(RuntimeError, match="without the logprobs"):
        run(SearchOptions(k=5), NoLogprobs(CANDIDATES, P_RIGHT))


@pytest.mark.parametrize("body,needle", [
    ({"verify": 4}, "P(1) depends on the prompt alone"),
    ({"verdict": "parsed"}, None),  # opt-in: scored by the share of 1s
    ({"verdict": "parsed", "score": "probability"}, "no probability"),
    ({"strategy": "consistency", "verify": 2}, "samples no verdicts"),
    ({"strategy": "best_of_n", "verify": 0}, "must be >= 1"),
    ({"strategy": "beam"}, "unknown"),
    ({"verdict": "mind_reading"}, "unknown"),
    ({"preliminary": 1, "verify": 2, "score": "verdicts"}, "round of strategy=verification"),
    ({"deadline_s": 0}, "must be > 0"),
    ({"verdict": "reasoned", "verify": 4}, None),  # written checks differ: several are meaningful
    ({"score": "verdicts", "verify": 4}, None),  # sampled 0/1 verdicts
])
def test_search_options_refuse_what_would_waste_work(body, needle):
    if needle is None:
        SearchOptions.from_request({"k": 4} | body)
        return
    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        SearchOptions.from_request({"k": 4} | body)


def test_verify_zero_still_means_majority_voting():
    opts = SearchOptions.from_request({"k": 4, "verify": 0})
    assert opts.strategy == "consistency"


def test_served_defaults_are_the_offline_selections_and_the_shipped_verifier_configs():
    from common.config import load_config
    from scaling.config import ScalingConfig
    from search.selection import SelectionOptions

    served, offline = SearchOptions(), SelectionOptions()
    assert (served.k_tie, served.top_margin, served.max_per_answer, served.preliminary_threshold) == (
        offline.k_tie, offline.top_margin, offline.max_per_answer, offline.preliminary_threshold)
    shipped = load_config("configs/scaling-smollm-verifier.yaml", ScalingConfig, [])
    assert (served.k, served.verify_temperature, served.verify_max_tokens) == (
        shipped.k_inf, shipped.verify_temperature, shipped.verify_max_tokens)


@pytest.mark.parametrize("body,ok", [
    ({"k": 0}, False), ({"k": 1}, True),
    ({"verify_max_tokens": 0, "verdict": "reasoned"}, False), ({"verify_max_tokens": 1, "verdict": "reasoned"}, True),
    ({"verify": -1}, False), ({"verify": 2}, False), ({"verify": 1}, True),
    ({"k_tie": -1}, False), ({"k_tie": 0}, True),
    ({"deadline_s": 0.5}, True), ({"deadline_s": -1}, False),
    ({"strategy": "verification", "preliminary": -1}, False),
])
def test_search_option_bounds(body, ok):
    if ok:
        SearchOptions.from_request(body)
    else:
        with pytest.raises(ValueError):
            SearchOptions.from_request(body)


def test_the_preliminary_round_gives_the_rest_of_the_verdicts_to_its_survivors_only():
    judge = ConstrainedJudge(CANDIDATES, {answer("8"): 0.1, answer("9"): 0.8})  # an 8 always gets a 0
    res = run(SearchOptions(k=5, strategy="verification", score="verdicts", verify=3, preliminary=1), judge)
    assert [len(c.verdicts) for c in res.candidates] == [1, 3, 1, 3, 1]
    assert res.answer == "9" and res.method == "unanimous_top"


def test_a_disagreeing_top_group_without_comparisons_goes_to_the_best_score():
    judge = ConstrainedJudge(CANDIDATES, {answer("8"): 0.8, answer("9"): 0.8})  # a tie across answers
    for options in (SearchOptions(k=5, strategy="verification", k_tie=0),
                    SearchOptions(k=5, strategy="verification", tie_break=False)):
        res = run(options, judge)
        assert (res.method, res.index, res.comparisons) == ("best_score", 0, [])


def test_candidates_without_an_answer_have_no_votes_and_majority_falls_back_to_the_first():
    judge = ConstrainedJudge(["no idea", "still none", answer("3")], {"no idea": 0.9, "still none": 0.2,
                                                                    answer("3"): 0.4})
    res = run(SearchOptions(k=3), judge)
    assert [(c.votes, c.answer_score) for c in res.candidates] == [(0, 0.0), (0, 0.0), (1, pytest.approx(0.4))]
    assert res.answer == "3"  # the one answer outvotes the best-scored candidate without one
    nobody = run(SearchOptions(k=2, strategy="consistency"), ConstrainedJudge(["no idea", "none"], {}))
    assert nobody.index == 0 and nobody.answer is None


class Recording(ConstrainedJudge):
    """Also keeps every verdict prompt's user text."""

    def __init__(self, *args):
        super().__init__(*args)
        self.verdict_prompts: list[str] = []

    async def generate(self, prompts, params):
        if params.regex is not None:
            self.verdict_prompts += [p[0]["content"] for p in prompts]
        return await super().generate(prompts, params)


def test_a_verdict_checks_the_question_given_or_the_last_user_message_without_the_answer_instruction():
    judge = Recording(CANDIDATES, P_RIGHT)
    run(SearchOptions(k=2), judge)
    assert all(f"Problem:\n{QUESTION}\n\nCandidate" in p for p in judge.verdict_prompts)
    judge = Recording(CANDIDATES, P_RIGHT)
    asyncio.run(search_and_select(judge.generate, answer_prompt(QUESTION), options=SearchOptions(k=2),
                                  params=SamplingParams(max_tokens=8), question="What is 2+2?"))
    assert all("Problem:\nWhat is 2+2?\n" in p for p in judge.verdict_prompts)


def test_question_of_a_conversation_a_plain_prompt_and_one_without_a_user_message():
    from search.serve.service_search import question_of

    conversation = [{"role": "system", "content": "Be brief."}, *answer_prompt(QUESTION),
                    {"role": "assistant", "content": "Let me see"}]
    assert question_of(conversation) == QUESTION
    assert question_of("Q: 1+1\nA:") == "Q: 1+1\nA:"
    only_system = [{"role": "system", "content": c} for c in ("first", "second", "last")]
    assert question_of(only_system) == "last"


def test_weighted_best_of_n_without_any_final_answer_takes_the_best_scored_candidate():
    judge = ConstrainedJudge(["no idea", "still none"], {"no idea": 0.2, "still none": 0.9})
    res = run(SearchOptions(k=2), judge)
    assert res.index == 1 and res.answer is None


def test_what_a_strategy_did_not_compute_reads_zero_in_the_response():
    res = run(SearchOptions(k=5, strategy="consistency"), ConstrainedJudge(CANDIDATES, P_RIGHT))
    assert [(c.score, c.answer_score, c.wins, c.verdicts) for c in res.candidates] == [(0.0, 0.0, 0, [])] * 5
    weighted = run(SearchOptions(k=5), ConstrainedJudge(CANDIDATES, P_RIGHT))
    assert [c.wins for c in weighted.candidates] == [0] * 5 and weighted.comparisons == []


def test_majority_never_votes_for_no_answer():
    judge = ConstrainedJudge(["no idea", "no idea either", answer("3")], {})
    assert run(SearchOptions(k=3, strategy="consistency"), judge).answer == "3"


def test_one_comparison_per_matchup_is_still_a_tie_break():
    class Comparing(ConstrainedJudge):
        async def generate(self, prompts, params):
            if params.regex == " [12]":  # a comparison: the second response wins
                top = [{"token": "2", "logprob": 0.0}, {"token": "1", "logprob": -9.0}]
                return [[Completion(" 2", "stop", 1, 2, logprobs=[top[0] | {"top_logprobs": top}])] * params.n
                        for _ in prompts]
            return await super().generate(prompts, params)

    tied = {answer("8"): 0.8, answer("9"): 0.8}  # a top group that disagrees
    res = run(SearchOptions(k=5, strategy="verification", k_tie=1), Comparing(CANDIDATES, tied))
    assert res.method == "tie_break" and {code for _, _, code in res.comparisons} == {2}


class Alternating(ConstrainedJudge):
    """Verdicts 1, 0, 1, ... across the samples of one request, whatever the candidate."""

    async def generate(self, prompts, params):
        if params.regex is None:
            return await super().generate(prompts, params)
        top = [{"token": "1", "logprob": math.log(0.5)}, {"token": "0", "logprob": math.log(0.5)}]
        return [[Completion(f" {1 - i % 2}", "stop", 1, 2, logprobs=[top[i % 2] | {"top_logprobs": top}])
                 for i in range(params.n)] for _ in prompts]


def test_identical_candidates_split_by_the_preliminary_round_get_their_own_verdict_counts():
    """Candidates 0, 2 and 4 are the same text, so their verdicts share one request: the first and
    last pass the preliminary round and the middle one does not, and only the passing ones get more."""
    res = run(SearchOptions(k=5, strategy="verification", score="verdicts", verify=3, preliminary=1,
                            tie_break=False), Alternating(CANDIDATES, P_RIGHT))
    assert [c.verdicts[0] for c in res.candidates] == [1, 1, 0, 0, 1]
    assert [len(c.verdicts) for c in res.candidates] == [3, 3, 1, 1, 3]
