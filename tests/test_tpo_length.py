"""TPO length control with thought and response lengths that differ independently.

The judge scores the response only, so by default length control measures the response
(`length_of="response"`); "completion" measures thought + response. Each test gives thoughts
lengths unrelated to the responses', so measuring the wrong part picks other pairs, another
rho and other length statistics.
"""

from __future__ import annotations

import random

import pytest

from thinking.pairs import Group, PairsConfig, Sample, build_pairs, choose_rho, pick


def S(score: float, thought: int, response: int) -> Sample:
    """A judged sample with a thought of `thought` characters and a response of `response`."""
    t, r = "t" * thought, "r" * response
    return Sample(completion=f"{t}\n{r}", thought=t, response=r, parsed=True, score=score)


def groups_with_long_good_responses() -> list[Group]:
    # The best response is long but follows a short thought; the rejected candidates' thoughts
    # are long. Measured on the response, length control must step in; on the completion the
    # best is already the shorter one.
    return [Group(f"g{g}", "p", [S(1.0, 5, 40), S(0.9, 60, 5), S(0.2, 5, 10), S(0.0, 50, 30)])
            for g in range(4)]


# length_of -> (rho, (thought, response) of chosen, of rejected, chosen_len, rejected_len)
EXPECTED = {
    "response": (0.1, (60, 5), (50, 30), 5.0, 30.0),
    "completion": (0.0, (5, 40), (50, 30), 46.0, 81.0),
}


@pytest.mark.parametrize("length_of", sorted(EXPECTED))
def test_rho_pairs_and_lengths_follow_the_measured_part(length_of):
    rho_want, chosen_want, rejected_want, chosen_len, rejected_len = EXPECTED[length_of]
    cfg = PairsConfig(length_of=length_of)
    groups = groups_with_long_good_responses()
    rho = choose_rho(groups, cfg)
    assert rho == pytest.approx(rho_want)
    chosen, rejected = pick(groups[0], rho, cfg)
    assert (len(chosen.thought), len(chosen.response)) == chosen_want
    assert (len(rejected.thought), len(rejected.response)) == rejected_want
    pairs, counts = build_pairs(groups, rho, cfg)
    assert counts["scored_pairs"] == len(pairs) == 4
    assert (counts["chosen_len"], counts["rejected_len"]) == (chosen_len, rejected_len)


def test_under_response_length_control_no_response_longer_than_needed_wins():
    # The case: measuring thought + response let a 40-character chosen response beat a
    # 30-character rejected one at rho 0; measured on the response, chosen are not longer.
    cfg = PairsConfig(length_of="response")
    groups = groups_with_long_good_responses()
    rho = choose_rho(groups, cfg)
    picks = [pick(g, rho, cfg) for g in groups]
    assert sum(len(c.response) for c, _ in picks) <= sum(len(r.response) for _, r in picks)
    assert rho > 0  # at rho 0 the 40-character response wins: length control had to act


def _shuffled_thoughts(groups: list[Group], rng: random.Random) -> list[Group]:
    return [Group(g.instruction_id, g.prompt, [S(s.score, rng.randrange(0, 300), len(s.response))
                                               for s in g.samples]) for g in groups]


def _moved_between_parts(groups: list[Group], rng: random.Random) -> list[Group]:
    """The same completion lengths, split differently between thought and response."""
    out = []
    for g in groups:
        samples = []
        for s in g.samples:
            total = len(s.thought) + len(s.response)
            cut = rng.randrange(1, total)
            samples.append(S(s.score, cut, total - cut))
        out.append(Group(g.instruction_id, g.prompt, samples))
    return out


def _outcome(groups: list[Group], cfg: PairsConfig) -> tuple:
    rho = choose_rho(groups, cfg)
    _, counts = build_pairs(groups, rho, cfg)
    picked = []
    for g in groups:
        c, r = pick(g, rho, cfg)
        picked.append((g.samples.index(c), g.samples.index(r)))
    return rho, picked, counts["chosen_len"], counts["rejected_len"]


def _random_groups(rng: random.Random) -> list[Group]:
    return [Group(f"g{g}", "p", [S(rng.choice([0.0, 0.25, 0.5, 0.75, 1.0]), rng.randrange(1, 200),
                                   rng.randrange(1, 200)) for _ in range(5)]) for g in range(8)]


@pytest.mark.parametrize("seed", range(5))
def test_response_length_control_ignores_the_thought(seed):
    rng = random.Random(seed)
    groups = [g for g in _random_groups(rng) if len({s.score for s in g.samples}) > 1]
    cfg = PairsConfig(length_of="response")
    assert _outcome(_shuffled_thoughts(groups, rng), cfg) == _outcome(groups, cfg)


@pytest.mark.parametrize("seed", range(5))
def test_completion_length_control_sees_only_the_whole_length(seed):
    rng = random.Random(seed)
    groups = [g for g in _random_groups(rng) if len({s.score for s in g.samples}) > 1]
    cfg = PairsConfig(length_of="completion")
    assert _outcome(_moved_between_parts(groups, rng), cfg) == _outcome(groups, cfg)


def test_the_two_settings_disagree_where_thoughts_and_responses_do():
    # guards the tests above against data on which both settings happen to agree
    groups = groups_with_long_good_responses()
    assert _outcome(groups, PairsConfig(length_of="response")) != _outcome(groups, PairsConfig(length_of="completion"))
