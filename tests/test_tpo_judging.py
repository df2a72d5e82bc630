"""TPO with a comparative (pairwise) judge: held-out responses judged head to head against the
seed's and the direct arm's, and no column such a judge cannot fill."""

from __future__ import annotations

import asyncio

from test_tpo import StubSampler, make_loop, tiny_cfg

from thinking.pairs import Sample
from verifiers.judges import Verdict


class HeadToHeadJudge:
    """A comparative judge (as the pairwise one): within a group, a right response beats a wrong
    one; a lone response scores 0, as Bradley-Terry over one item does."""

    name = "head-to-head"
    comparative = True

    def __init__(self):
        self.groups: list[int] = []

    async def score(self, items):
        sizes: dict[str, int] = {}
        for i in items:
            sizes[i.group] = sizes.get(i.group, 0) + 1
        self.groups += list(sizes.values())
        return [Verdict.of(0.0 if sizes[i.group] == 1 else (1.0 if i.response.strip() == i.reference else -1.0))
                for i in items]


def test_a_comparative_judge_measures_by_head_to_head_win_rates(store, experiment_name):
    """The pairwise judge scored each held-out response alone (score 0 for every one), so both win
    rates were 0.5 and the score 0 in every run, whatever the model did; and the report had an
    accuracy column it could not fill. Now each response is judged beside the seed's and the
    direct arm's for the same instruction and seed."""
    cfg, sampler, judge, trained = tiny_cfg(experiment_name), StubSampler(), HeadToHeadJudge(), []
    summary = asyncio.run(make_loop(cfg, store, sampler, judge, trained).run())
    assert 2 in judge.groups  # pairs judged together
    for e in summary["iterations"] + summary["baselines"]["direct"]:
        assert e["score"] is None and e["accuracy"] is None  # what a comparative judge cannot give
    assert len(summary["iterations"][0]["win_rate_vs_seed_seeds"]) == 2  # judged head to head per seed
    assert summary["baselines"]["direct"][0]["win_rate_vs_seed"] == 0.5  # the seed against itself: all ties
    assert "win_rate_vs_direct" in summary["iterations"][1]


def test_head_to_head_win_rates_move_with_the_responses(store, experiment_name):
    cfg = tiny_cfg(experiment_name)
    loop = make_loop(cfg, store, StubSampler(), HeadToHeadJudge(), [])
    heldout = [{"id": f"i{k}", "instruction": f"{k}+1", "reference": str(k + 1)} for k in range(4)]

    def samples(answers):
        return [Sample(completion=a, thought="", response=a, parsed=True) for a in answers]

    right, wrong = samples(["1", "2", "3", "4"]), samples(["0", "0", "0", "0"])
    half = samples(["1", "2", "0", "0"])
    run = lambda key, a, b: asyncio.run(loop.head_to_head(key, heldout, a, b))  # noqa: E731
    assert run(("c", "1"), right, wrong) == 1.0 and run(("c", "2"), wrong, right) == 0.0
    assert run(("c", "3"), half, wrong) == 0.75 and run(("c", "4"), right, right) == 0.5
    assert run(("c", "1"), wrong, right) == 1.0  # stored: a restart reuses the verdicts under its key
