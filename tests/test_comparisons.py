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
    assert lines[2].startswith("| the seed-only control |")  # the control the report leads with (issue #42)
    assert "**>0**" not in lines[2].split("|")[3]  # held-out against the control: it straddles 0
    assert "**>0**" in lines[3]  # 3, 3, 2 against the seed model: an interval above zero


def test_unscored_demo_tasks_blank_only_their_column_and_no_held_out_tasks_drop_theirs():
    d = paired_difference([5, 6, 7], [4, 4, 4])
    both = {"last_minus_seed_model": {"solved_seeds": d, "heldout_solved_seeds": d}}
    header, rule, row = comparison_lines(both, 1, scored=False)
    assert header == "| iteration 1 minus | demo solved | held-out solved | demo hit rate | held-out hit rate |"
    assert rule == "|---|---|---|---|---|"  # one per column, or markdown renders no table
    cells = [c.strip() for c in row.split("|")[2:-1]]
    assert cells[0] == "not scored" and cells[1].startswith("+2.00 [") and cells[2:] == ["–", "–"]
    demo_only = comparison_lines({"last_minus_seed_model": {"solved_seeds": d}}, 1)
    assert demo_only[:2] == ["| iteration 1 minus | demo solved | demo hit rate |", "|---|---|---|"]
    assert demo_only[2].split("|")[2].strip().startswith("+2.00 [")


def _entry(solved, seeds=(0, 1, 2), **extra):
    return {"seeds": list(seeds), "solved_seeds": solved, **extra}


def test_one_measured_iteration_is_compared_with_the_controls_only():
    # with a single measured model there is no seed model to compare it with (not itself)
    comps = comparisons([_entry([3, 4, 5])], {"seed_only_control": _entry([1, 2, 3])})
    assert set(comps) == {"last_minus_seed_only_control"}
    assert comps["last_minus_seed_only_control"]["solved_seeds"]["diffs"] == [2, 2, 2]


def test_a_first_measured_iteration_after_zero_is_not_called_the_seed_model():
    # controls.measure_from=1: iterations 1 and 2 measured, the seed model never was
    entries = [{"iteration": 0}, _entry([1, 1, 1], iteration=1), _entry([2, 2, 3], iteration=2)]
    comps = comparisons(entries, {"seed_only_control": _entry([1, 2, 3])})
    assert set(comps) == {"last_minus_seed_only_control"}


def test_the_last_of_several_iterations_is_the_one_compared():
    entries = [_entry([1, 1, 1]), _entry([2, 2, 2]), _entry([5, 6, 7]), {"iteration": 3}]  # the last: unmeasured
    comps = comparisons(entries, None)
    assert comps["last_minus_seed_model"]["solved_seeds"]["diffs"] == [4, 5, 6]


def test_a_control_on_other_seeds_does_not_hide_the_controls_after_it():
    baselines = {"random_prior": _entry([0, 0], seeds=(7, 8)), "seed_only_control": _entry([1, 1, 1])}
    comps = comparisons([_entry([1, 1, 1]), _entry([2, 3, 4])], baselines)
    assert set(comps) == {"last_minus_seed_model", "last_minus_seed_only_control"}


def test_only_metrics_both_sides_measured_are_compared():
    last = _entry([2, 3, 4], heldout_solved_seeds=[1, 1, 1])
    comps = comparisons([_entry([1, 1, 1]), last], None)  # the seed model has no held-out numbers
    assert set(comps["last_minus_seed_model"]) == {"solved_seeds"}


def test_two_seeds_give_an_interval():
    d = paired_difference([1.0, 3.0], [0.0, 0.0])
    assert d["ci95"] == pytest.approx([2.0 - 12.706, 2.0 + 12.706])  # sd sqrt(2), t(0.975, 1) 12.706


@pytest.mark.parametrize("ci,mark", [((0.5, 1.5), " **>0**"), ((-1.5, -0.5), " **<0**"), ((-0.5, 0.5), ""),
                                     ((0.0, 1.0), ""), ((-1.0, 0.0), "")])
def test_a_difference_is_marked_only_when_its_whole_interval_is_on_one_side_of_zero(ci, mark):
    # "a claim that the model learned needs the whole interval above 0": touching 0 is not above
    d = {"mean": sum(ci) / 2, "ci95": list(ci)}
    line = comparison_lines({"last_minus_seed_model": {"solved_seeds": d}}, 2)[2]
    cell = line.split("|")[2]
    assert cell.endswith(f"]{mark} "), cell


def test_one_seed_gives_a_mean_and_no_interval():
    d = paired_difference([3.0], [1.0])
    assert d["mean"] == 2.0 and d["sd"] is None and d["ci95"] is None


def test_nothing_measured_compares_nothing():
    assert comparisons([], {"seed_only_control": _entry([1, 2, 3])}) == {}
    assert comparisons([{"iteration": 0}], {"seed_only_control": _entry([1, 2, 3])}) == {}
