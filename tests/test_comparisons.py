"""Paired differences of the last model against its controls: the numbers, the CI, the pairing."""

from __future__ import annotations

import pytest

from evolution.comparisons import comparison_lines, comparisons, paired_difference


def test_paired_difference_has_the_t_interval():
    d = paired_difference([10, 12, 11, 13, 14], [9, 10, 10, 11, 12])  # diffs 1, 2, 1, 2, 2
    assert d["diffs"] == [1, 2, 1, 2, 2] and d["mean"] == pytest.approx(1.6)
    # sd = 0.5477, t(0.975, 4) = 2.776: half-width 0.680
    assert d["ci95"] == pytest.approx([1.6 - 0.680, 1.6 + 0.680], abs=1e-3)
    with pytest.raises(ValueError, match="same seeds"):
        paired_difference([1, 2], [1])


def test_comparisons_pair_the_last_iteration_with_each_control_on_the_same_seeds():
    seeds = [0, 1, 2]
    m = lambda s, h: {"seeds": seeds, "solved_seeds": s, "heldout_solved_seeds": h,  # noqa: E731
                      "hit_rate_seeds": [0.1] * 3, "heldout_hit_rate_seeds": [0.1] * 3}
    entries = [m([5, 6, 7], [4, 4, 4]) | {"iteration": 0}, m([8, 9, 9], [5, 6, 4]) | {"iteration": 1}]
    baselines = {"seed_only_control": m([7, 7, 8], [4, 5, 5]),
                 "random_prior": {"seeds": [0, 1], "solved_seeds": [1, 1]}}  # other seeds: not paired
    comps = comparisons(entries, baselines)
    assert set(comps) == {"last_minus_seed_model", "last_minus_seed_only_control"}
    assert comps["last_minus_seed_model"]["solved_seeds"]["diffs"] == [3, 3, 2]
    assert comps["last_minus_seed_only_control"]["heldout_solved_seeds"]["diffs"] == [1, 1, -1]
    lines = comparison_lines(comps, 1)
    assert "**>0**" in lines[2]  # 3, 3, 2 against the seed model: an interval above zero
    assert "**>0**" not in lines[3].split("|")[3]  # held-out against the control: it straddles 0
