"""Hindsight relabeling and greedy-diverse selection on a real ARC task."""

from __future__ import annotations

import random

import pytest

from common.config import load_config
from evolution.config import SoarConfig
from evolution.gridtext import grid_text
from evolution.hindsight import HindsightConfig, build_rows, relabeled_task, select_programs
from evolution.learn import hindsight_rows
from evolution.programs import Step, render, run
from evolution.prompts import CODE_PREFIX
from evolution.records import Candidate
from evolution.tasks import load_split
from store import keys
from store.codehash import code_hash

TASK = "3c9b0459"  # rotate 180
PROGRAMS = {  # name -> program; only rot180 is right
    "rot180": (Step("rot180"),), "rot180_long": (Step("flip_h"), Step("flip_v")),
    "flip_h": (Step("flip_h"),), "flip_v": (Step("flip_v"),), "transpose": (Step("transpose"),),
    "rot90": (Step("rot90"),), "identity_like": (Step("recolor", (9, 9)),),
}


@pytest.fixture(scope="module")
def task():
    return load_split("arc1-train")[TASK]


def candidate(task, program, **kw) -> Candidate:
    code = render(program)
    train = tuple(run(program, ex.input) for ex in task.train)
    test = tuple(run(program, ex.input) for ex in task.test)
    return Candidate(task.id, code, code_hash(code), train_correct=tuple(o == ex.output for o, ex in zip(train, task.train, strict=True)),
                     train_outputs=train, test_outputs=test, all_ok=True, **kw)


@pytest.fixture(scope="module")
def cands(task):
    return [candidate(task, p) for p in PROGRAMS.values()]


def test_relabeled_task_is_solved_by_its_program(task, cands):
    rng = random.Random(0)
    for c, program in zip(cands, PROGRAMS.values(), strict=True):
        new = relabeled_task(task, c, rng)
        assert len(new.train) == len(task.train) and len(new.test) == len(task.test)
        assert all(run(program, ex.input) == ex.output for ex in new.train + new.test)
    broken = Candidate(task.id, "x", "h", all_ok=False)
    assert relabeled_task(task, broken, rng) is None


def test_greedy_diverse_keeps_wrong_programs_in_the_dataset(task, cands):
    """The published code's inverted condition drops the diverse half; here it lands."""
    cfg = HindsightConfig(per_task=4, selection="greedy-diverse", drop=())
    chosen = select_programs(cands, cfg, random.Random(0))
    assert len(chosen) == 4
    assert chosen[0].code == render(PROGRAMS["rot180"])  # best accuracy, then shorter code
    assert sum(c.train_accuracy < 1.0 for c in chosen) >= 2
    rows, counts = build_rows({task.id: task}, {task.id: cands}, cfg, iteration=0)
    assert counts["wrong_program_rows"] >= 2 and counts["sample_rows"] == 4
    assert {CODE_PREFIX + r["completion"] for r in rows} == {c.code for c in chosen}


def test_primitive_diverse_takes_each_primitive_sets_best_before_any_sets_second(task):
    """Many recolor programs do not fill the rows: one of them, then one of each other set."""
    recolors = [candidate(task, (Step("recolor", (a, b)),)) for a, b in ((1, 2), (2, 3), (3, 4), (4, 5))]
    others = [candidate(task, PROGRAMS[name]) for name in ("flip_h", "rot90", "rot180", "rot180_long")]
    cfg = HindsightConfig(per_task=5, selection="primitive-diverse", drop=())
    chosen = select_programs(recolors + others, cfg, random.Random(0))
    assert chosen[0].code == render(PROGRAMS["rot180"])  # the best program's set comes first
    # then rot180_long (flip_h + flip_v: a set of its own), and one each of flip_h, rot90, recolor,
    # in the order of each set's best program; no second recolor before every set had one
    assert sum(c.code.count("recolor") for c in chosen) == 1 and len(chosen) == 5
    assert {c.code for c in chosen[1:]} >= {render(PROGRAMS["rot180_long"]), render(PROGRAMS["flip_h"]),
                                            render(PROGRAMS["rot90"])}
    more = select_programs(recolors + others, HindsightConfig(per_task=8, selection="primitive-diverse", drop=()),
                           random.Random(0))
    assert sum(c.code.count("recolor") for c in more) == 4  # a set's later programs once every set had one


def test_right_programs_count_by_code_wrong_ones_by_outputs(task, cands):
    """Two right programs are two ways to solve the task: both stay. Two wrong programs with
    the same outputs define the same relabeled task: the shorter stays."""
    flip_h_long = candidate(task, (Step("flip_v"), Step("flip_v"), Step("flip_h")))
    chosen = select_programs(cands + [flip_h_long], HindsightConfig(per_task=50, selection="greedy"),
                             random.Random(0))
    codes = {c.code for c in chosen}
    assert {render(PROGRAMS["rot180"]), render(PROGRAMS["rot180_long"])} <= codes
    assert render(PROGRAMS["flip_h"]) in codes and flip_h_long.code not in codes
    only = select_programs(cands, HindsightConfig(per_task=50, selection="correct-only"), random.Random(0))
    assert [c.code for c in only] == [render(PROGRAMS["rot180"]), render(PROGRAMS["rot180_long"])]


def test_correct_repeat_weights_right_programs_with_reshuffled_examples(task, cands):
    """correct_repeat=3: each right program gives 3 rows, each with its examples in another
    order; wrong programs still give one. With 1, the rows are today's."""
    cfg = HindsightConfig(per_task=50, selection="greedy", drop=())
    once, _ = build_rows({task.id: task}, {task.id: cands}, cfg, iteration=0)
    thrice, _ = build_rows({task.id: task}, {task.id: cands}, HindsightConfig(per_task=50, selection="greedy", drop=(),
                                                                              correct_repeat=3), iteration=0)
    right = {render(PROGRAMS["rot180"]), render(PROGRAMS["rot180_long"])}

    def by_code(rows):
        out: dict[str, list[str]] = {}
        for r in rows:
            out.setdefault(CODE_PREFIX + r["completion"], []).append(r["prompt"])
        return out

    assert {c: len(p) for c, p in by_code(once).items()} == {c.code: 1 for c in select_programs(cands, cfg, random.Random(0))}
    counts = {c: len(p) for c, p in by_code(thrice).items()}
    assert all(counts[c] == (3 if c in right else 1) for c in counts) and set(counts) == set(by_code(once))
    assert all(len(set(by_code(thrice)[c])) > 1 for c in right)  # not one prompt three times
    with pytest.raises(ValueError, match="correct_repeat"):
        HindsightConfig(correct_repeat=0)


def test_programs_not_worth_learning_are_filtered_from_the_data(task, cands):
    """SOAR's filters apply to training data: the identity program defines no task to learn."""
    identity = candidate(task, PROGRAMS["identity_like"])
    rows, counts = build_rows({task.id: task}, {task.id: cands}, HindsightConfig(per_task=50), iteration=0)
    assert identity.code not in {CODE_PREFIX + r["completion"] for r in rows} and counts["filtered"] >= 1
    kept, _ = build_rows({task.id: task}, {task.id: cands}, HindsightConfig(per_task=50, drop=()), iteration=0)
    assert identity.code in {CODE_PREFIX + r["completion"] for r in kept}


def test_refinement_rule_solves_keeps_only_children_that_solve_the_task(task, cands):
    parent = cands[2]  # flip_h: wrong
    solved = candidate(task, PROGRAMS["rot180"], kind="refine", parent=parent.code_hash)
    better = candidate(task, PROGRAMS["transpose"], kind="refine", parent=cands[6].code_hash)
    pool = [parent, solved, cands[6], better]
    for rule, want in (("improves", None), ("solves", {solved.code})):
        rows, _ = build_rows({task.id: task}, {task.id: pool},
                             HindsightConfig(per_task=1, refinement_per_task=5, refine_rule=rule, drop=()), iteration=0)
        children = {CODE_PREFIX + r["completion"] for r in rows if r["kind"] == "refine"}
        if want is None:
            assert solved.code in children
        else:
            assert children == want


def test_refinement_rows_pair_parents_with_better_children(task, cands):
    parent = cands[2]  # flip_h: wrong
    child = candidate(task, PROGRAMS["rot180"], kind="refine", parent=parent.code_hash)
    worse = candidate(task, PROGRAMS["transpose"], kind="refine", parent=cands[0].code_hash)
    rows, counts = build_rows({task.id: task}, {task.id: [parent, child, cands[0], worse]},
                              HindsightConfig(per_task=1, refinement_per_task=5), iteration=0)
    refine = [r for r in rows if r["kind"] == "refine"]
    assert counts["refine_rows"] == 1 and CODE_PREFIX + refine[0]["completion"] == child.code
    assert parent.code.strip() in refine[0]["prompt"]
    assert grid_text(task.test[0].output, "digits") not in refine[0]["prompt"]  # never the answer


def test_vote_weighting_prefers_programs_the_majority_agrees_with(task):
    """Test-time training: equally (in)accurate programs, ranked by their vote group's weight."""
    test_a, test_b = ((1, 1),), ((2, 2),)
    n = len(task.train)

    def cand(code: str, tag: int, test) -> Candidate:
        outs = tuple(((tag, k),) for k in range(n))  # distinct train outputs per program
        return Candidate(task.id, code, code_hash(code), train_correct=(False,) * n, train_outputs=outs,
                         test_outputs=(test,), all_ok=True)

    codes = [f"def transform(grid):\n    return {i:02d}" for i in range(40)]
    lone = min(codes, key=code_hash)  # the smallest hash wins plain ties: give it the lonely output
    majority = [c for c in codes if c != lone][:2]
    cands = [cand(lone, 9, test_b), cand(majority[0], 1, test_a), cand(majority[1], 2, test_a)]
    plain = select_programs(cands, HindsightConfig(per_task=1, selection="greedy"), random.Random(0))
    assert plain[0].code == lone
    from evolution.hindsight import vote_weights
    weighted = select_programs(cands, HindsightConfig(per_task=1, selection="greedy"), random.Random(0),
                               vote_weights(task, cands))
    assert weighted[0].code in majority


def test_last_iteration_learns_from_programs_it_found_again(task, store, experiment_name):
    """`iterations: last` takes what the last search tried, not what it archived first: a
    program archived by iteration 0 and found again by iteration 1 is iteration 1's too."""
    old, new = candidate(task, PROGRAMS["rot180"]), candidate(task, PROGRAMS["flip_h"])
    archive = store.archive(experiment_name)
    record = old.to_record() | {"iteration": 0}
    archive.add_many([record], marks={keys.search_counter(0, "seen", task.id): {old.code_hash: 0}})
    archive.add_many([record, new.to_record() | {"iteration": 1}],  # found again, and a new one
                     marks={keys.search_counter(1, "seen", task.id): {old.code_hash: 0, new.code_hash: 1}})
    def config(iterations: str) -> SoarConfig:
        return load_config(None, SoarConfig, [f"experiment={experiment_name}", "search.prompt_style=compact",
                                              f"learn.hindsight.iterations={iterations}"])

    rows, _ = hindsight_rows(config("last"), store, {task.id: task}, iteration=1)
    assert {CODE_PREFIX + r["completion"] for r in rows} == {old.code, new.code}
    assert hindsight_rows(config("all"), store, {task.id: task}, iteration=1)[1]["sample_rows"] == 2


def test_hindsight_rows_do_not_depend_on_the_archives_order(store, experiment_name, task, cands, monkeypatch):
    """A resumed iteration must train on the same rows, but the archive hands a task's
    candidates back "in no particular order" (a Redis hash's: it changes with the table's
    history), so the rows must not depend on it."""
    from store.archive import CandidateArchive

    cfg = load_config(None, SoarConfig, [f"experiment={experiment_name}", "search.prompt_style=compact",
                                         "learn.hindsight.iterations=all", "learn.hindsight.per_task=4"])
    store.archive(experiment_name).add_many([c.to_record() for c in cands])
    rows, _ = hindsight_rows(cfg, store, {task.id: task}, iteration=0)
    in_order = CandidateArchive.get_task
    monkeypatch.setattr(CandidateArchive, "get_task", lambda self, *a, **kw: in_order(self, *a, **kw)[::-1])
    again, _ = hindsight_rows(cfg, store, {task.id: task}, iteration=0)
    assert rows and rows == again


def test_chat_rows_are_what_the_sampler_was_shown_in_trls_conversational_form(task, cands):
    """A chat model's hindsight rows: the user message holds the relabeled task's numpy-style prompt
    with the task's one-shot example (as its search prompts show), the assistant message the one
    ```python block that prompt asks for; the prompt of a row is what SoarSearch would send."""
    from evolution.extract import extract_code
    from evolution.prompts import as_prompt, one_shot_example, sampling_prompt

    arc1 = load_split("arc1-train")
    examples = {"6150a2bd": (arc1["6150a2bd"], "def transform(grid):\n    return grid[::-1]\n"),
                "67a3c6ac": (arc1["67a3c6ac"], "def transform(grid):\n    return [r[::-1] for r in grid]\n")}
    rows, _ = build_rows({task.id: task}, {task.id: cands}, HindsightConfig(per_task=4), 0, style="numpy",
                         chat=True, examples=examples)
    assert rows
    example = one_shot_example(task.id, examples)
    for row in rows:
        (user,), (assistant,) = row["prompt"], row["completion"]
        assert user["role"] == "user" and assistant["role"] == "assistant"
        assert "# Solved example puzzle" in user["content"] and example[1].strip() in user["content"]
        assert assistant["content"].startswith("```python\n") and assistant["content"].endswith("\n```")
        assert extract_code(assistant["content"]).strip() in {c.code.strip() for c in cands}
    # the search's own prompt for the task has exactly this shape
    searched = as_prompt(sampling_prompt(task.without_answers(), "numpy", example), chat=True)
    assert searched[0]["content"].split("# Puzzle to solve")[0] == rows[0]["prompt"][0]["content"].split("# Puzzle to solve")[0]


def test_text_rows_of_numpy_prompts_answer_in_the_code_block_they_ask_for(task, cands):
    rows, _ = build_rows({task.id: task}, {task.id: cands}, HindsightConfig(per_task=2), 0, style="numpy")
    assert rows and all(isinstance(r["prompt"], str) and r["completion"].startswith("```python\n") for r in rows)
    assert all("one ```python block" in r["prompt"] for r in rows)


def test_learn_micro_batch_splits_a_step_into_forward_passes():
    """Same rows a step, fewer at once: a chat model's logits on 8 long rows took 16 GB and Ray
    killed the training for memory, again and again."""
    from evolution.config import LearnConfig

    assert LearnConfig(batch_size=8).batch_args() == {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1}
    assert LearnConfig(batch_size=8, micro_batch=2).batch_args() == {"per_device_train_batch_size": 2,
                                                                       "gradient_accumulation_steps": 4}
    for bad in (3, 0, -2):
        with pytest.raises(ValueError, match="micro_batch"):
            LearnConfig(batch_size=8, micro_batch=bad)


# -- edges found by `make mutate MODULES=hindsight` (docs/testing.md, issue 46) --------------------

def test_the_defaults_are_the_papers_and_the_bounds_take_their_smallest_values():
    cfg = HindsightConfig()
    assert (cfg.per_task, cfg.selection, cfg.refinement_per_task, cfg.vote_weighted) == (50, "greedy-diverse", 10, False)
    HindsightConfig(per_task=1, refinement_per_task=0)  # no refinement rows at all is a setting
    with pytest.raises(ValueError, match="per_task=0"):
        HindsightConfig(per_task=0)
    with pytest.raises(ValueError, match="refinement_per_task=-1"):
        HindsightConfig(refinement_per_task=-1)


def test_a_program_that_did_not_run_cleanly_on_every_input_defines_no_task(task, cands):
    from dataclasses import replace

    right = cands[0]
    assert relabeled_task(task, replace(right, all_ok=False), random.Random(0)) is None  # its outputs all there
    assert relabeled_task(task, replace(right, test_outputs=()), random.Random(0)) is None  # one output short


def test_greedy_diverse_takes_the_best_half_rounded_up_and_only_wrong_programs_beside_them(task, cands):
    rights = [candidate(task, (Step("rot180"),) + (Step("rot90"),) * (4 * i)) for i in range(5)]  # 5 right ones
    wrongs = [cands[2], cands[5]]  # flip_h, rot90
    for n, want_right in ((1, 1), (2, 1), (3, 2), (4, 2), (5, 3)):
        for seed in range(6):
            chosen = select_programs(rights + wrongs, HindsightConfig(per_task=n, drop=()), random.Random(seed))
            assert sum(c.train_accuracy == 1.0 for c in chosen) == want_right, (n, seed)
            assert chosen[0].code == rights[0].code  # the shortest right program leads


def _refine(c: Candidate, parent: Candidate, correct: tuple[bool, ...], kind: str = "refine") -> Candidate:
    from dataclasses import replace

    return replace(c, kind=kind, parent=parent.code_hash, train_correct=correct)


def test_which_children_teach_refinement_under_each_rule(task, cands):
    n = len(task.train)
    none, one, every = (False,) * n, (True,) + (False,) * (n - 1), (True,) * n
    p0 = replace_correct(cands[2], none)  # a parent that solved nothing
    p1 = replace_correct(cands[3], one)  # one pair
    full = replace_correct(cands[4], every)  # all of them
    improves = _refine(cands[5], p0, one)  # one more pair, not all
    solves = _refine(cands[1], p0, every)
    level = _refine(cands[6], p1, (False, True) + (False,) * (n - 2))  # as many pairs as its parent
    after_full = _refine(cands[0], full, every)  # its parent was already right
    sampled = _refine(candidate(task, (Step("flip_v"), Step("rot90"))), p0, every, kind="sample")  # not a refinement
    pool = [p0, p1, full, improves, solves, level, after_full, sampled]
    rng = random.Random(0)

    def children(rule: str, **kw) -> set[str]:
        from evolution.hindsight import refinement_rows

        rows = refinement_rows(task, pool, HindsightConfig(refinement_per_task=10, refine_rule=rule), rng, **kw)
        return {CODE_PREFIX + r["completion"] for r in rows}

    assert children("improves") == {improves.code, solves.code}
    assert children("solves") == {solves.code}
    assert children("improves", learnable={solves.code_hash}) == {solves.code}
    assert children("improves", learnable=set()) == set()


def replace_correct(c: Candidate, correct: tuple[bool, ...]) -> Candidate:
    from dataclasses import replace

    return replace(c, train_correct=correct)


def test_refinement_rows_stop_at_refinement_per_task(task, cands):
    from evolution.hindsight import refinement_rows

    n = len(task.train)
    parent = replace_correct(cands[2], (False,) * n)
    kids = [_refine(c, parent, (True,) * n) for c in (cands[0], cands[1], cands[5])]
    for cap in (0, 1, 2):
        rows = refinement_rows(task, [parent, *kids], HindsightConfig(refinement_per_task=cap), random.Random(0))
        assert len(rows) == cap


def test_sampling_rows_called_alone_are_text_rows_unweighted_unless_asked(task):
    """sampling_rows' defaults: text prompts (not chat), ranking by accuracy then code length
    (the vote weighs in only with vote_weighted)."""
    from evolution.hindsight import sampling_rows

    n = len(task.train)

    def cand(code: str, tag: int, test) -> Candidate:
        return Candidate(task.id, code, code_hash(code), train_correct=(False,) * n,
                         train_outputs=tuple(((tag, k),) for k in range(n)), test_outputs=(test,), all_ok=True)

    lone = cand(CODE_PREFIX + "    return 1", 9, ((2, 2),))  # shortest, alone in its vote group
    majority = [cand(CODE_PREFIX + f"    return {i:04d}", i, ((1, 1),)) for i in (1, 2)]
    rows = sampling_rows(task, [lone, *majority], HindsightConfig(per_task=1, selection="greedy"), random.Random(0),
                         style="compact")
    assert [CODE_PREFIX + r["completion"] for r in rows] == [lone.code] and isinstance(rows[0]["prompt"], str)
    voted = sampling_rows(task, [lone, *majority], HindsightConfig(per_task=1, selection="greedy", vote_weighted=True),
                          random.Random(0))
    assert CODE_PREFIX + voted[0]["completion"] in {m.code for m in majority}


def test_build_rows_counts_exactly_what_it_made_and_dropped(task, cands):
    n = len(task.train)
    parent = replace_correct(cands[2], (False,) * n)
    child = _refine(cands[0], parent, (True,) * n)
    identity = candidate(task, PROGRAMS["identity_like"])
    other = load_split("arc1-train")["6150a2bd"]
    rows, counts = build_rows({task.id: task, other.id: other},
                              {task.id: [parent, child, cands[5], identity]},
                              HindsightConfig(per_task=50, selection="greedy"), iteration=0)
    assert counts == {"sample_rows": 3, "refine_rows": 1, "wrong_program_rows": 2, "tasks_with_rows": 1, "filtered": 1}
    only_samples, counts = build_rows({task.id: task}, {task.id: [cands[5]]}, HindsightConfig(), iteration=0)
    assert counts["tasks_with_rows"] == 1 and counts["refine_rows"] == 0  # sample rows alone count the task


def test_refinement_rows_take_turns_across_parent_bins_and_stop_at_the_cap(task, cands):
    from evolution.hindsight import refinement_rows

    n = len(task.train)
    broken = replace_correct(cands[2], (False,) * n)  # bin "zero"
    partly = replace_correct(cands[3], (True,) + (False,) * (n - 1))  # bin "low"
    from_broken = [_refine(c, broken, (True,) * n) for c in (cands[0], cands[1])]
    from_partly = [_refine(cands[5], partly, (True,) * n)]
    pool = [broken, partly, *from_broken, *from_partly]
    codes = {c.code for c in from_partly}
    for cap, want in ((1, 1), (2, 2), (3, 3), (5, 3)):
        rows = refinement_rows(task, pool, HindsightConfig(refinement_per_task=cap), random.Random(0))
        assert len(rows) == want, cap
        if cap >= 2:  # one turn each before either bin gets a second
            assert codes <= {CODE_PREFIX + r["completion"] for r in rows}
