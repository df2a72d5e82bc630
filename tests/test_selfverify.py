"""Self-verification prompts and verdict parsing, final answers, and the arithmetic corpus."""

from __future__ import annotations

import random
import re

import pytest

from scaling.arith_problems import (
    check_redo,
    check_text,
    check_trace,
    corrupt,
    make_problems,
    noisy_solution,
    seed_corpus,
)
from verifiers.math_answers import (
    extract_answer,
    group_answers,
    is_equivalent,
    load_jsonl_dataset,
    normalize_answer,
)
from verifiers.selfverify import (
    Verdict,
    compare_prompt,
    parse_comparison,
    parse_verification,
    verdict_code,
    verify_prompt,
)


@pytest.mark.parametrize("text,value", [
    ("1. 7+5=12 ok\nVerdict: 1", 1),
    ("checks...\n**Verdict:** 0", 0),
    ("Verdict = \\boxed{1}", 1),
    ("VERDICT: correct", 1),
    ("verdict: Incorrect.", 0),
    ("Verdict: 1 ... on reflection, step 2 is wrong. Verdict: 0", 0),  # the last verdict counts
    (" 7+5=12 ok. 12-3=9 ok. Answer 9 ok. Verdict: 1", 1),
])
def test_verification_verdicts_parse(text, value):
    assert parse_verification(text) == Verdict(value, "ok")


@pytest.mark.parametrize("text", ["", "I think it is right", "Verdict:", "Verdict: 2", "Verdict: maybe", "verd: 1"])
def test_unparsable_verdicts_are_not_guessed(text):
    v = parse_verification(text)
    assert v == Verdict(None, "unparsable") and verdict_code(v) == -1


@pytest.mark.parametrize("text,value", [("Verdict: 2", 2), ("verdict: Response 1", 1), ("**Verdict**: 1.", 1)])
def test_comparison_verdicts_parse(text, value):
    assert parse_comparison(text) == Verdict(value, "ok")


@pytest.mark.parametrize("text", ["Verdict: 0", "both are fine", "Verdict: 3"])
def test_unparsable_comparisons(text):
    assert parse_comparison(text).status == "unparsable"


def test_full_prompts_ask_for_rewrite_scan_and_verdict():
    (msg,) = verify_prompt("What is 2+2?", "2+2=4, \\boxed{4}")
    text = msg["content"]
    assert "statements" in text and "justification" in text and "Verdict: 1" in text and "\\boxed{4}" in text
    (cmp,) = compare_prompt("Q?", "first", "second")
    assert "Response 1:\nfirst" in cmp["content"] and "Verdict: 2" in cmp["content"]
    with pytest.raises(ValueError, match="compact"):
        verify_prompt("q", "r", style="short")  # type: ignore[arg-type]


@pytest.mark.parametrize("text,answer", [
    ("so \\boxed{\\frac{1}{2}} is it", "\\frac{1}{2}"),
    ("7+5=12. 12-3=9. Answer: 9", "9"),
    ("The final answer is 42.", "42"),
    ("we get 3 and then 17", "17"),
    ("no numbers here", None),
    # regression: a cue with nothing after it crashed the scaling demo (IndexError)
    ("Answer:\n\n", None),
    ("Answer: ", None),
    ("x=3 Answer:", "3"),
])
def test_extract_answer(text, answer):
    assert extract_answer(text) == answer


def test_equivalence_and_grouping_use_math_verify():
    assert is_equivalent("0.5", "\\frac{1}{2}") and is_equivalent("12.0", "12")
    assert not is_equivalent("13", "12") and not is_equivalent(None, "12")
    assert normalize_answer("1,000") == normalize_answer("1000")
    assert group_answers(["12", "12.0", "13", None, "1/2", "0.5"]) == [0, 0, 1, -1, 2, 2]


def test_jsonl_dataset_accepts_math500_keys_and_names_bad_lines(tmp_path):
    p = tmp_path / "math.jsonl"
    p.write_text('{"problem": "1+1?", "answer": "2", "unique_id": "x/1"}\n\n{"question": "2+2?", "answer": 4}\n')
    rows = load_jsonl_dataset(p)
    assert rows == [{"id": "x/1", "question": "1+1?", "answer": "2"}, {"id": "3", "question": "2+2?", "answer": "4"}]
    p.write_text('{"question": "q"}\n')
    with pytest.raises(ValueError, match=r"math.jsonl:1 needs"):
        load_jsonl_dataset(p)


def test_problems_have_consistent_solutions():
    for row in make_problems(50, seed=7):
        assert extract_answer(row["solution"]) == row["answer"]
        assert 0 <= int(row["answer"]) <= 99


def test_corrupted_solutions_are_wrong_and_the_check_finds_the_first_bad_step():
    rng = random.Random(0)
    for _ in range(300):
        start, ops = rng.randint(2, 30), [("+", rng.randint(1, 9)), ("-", rng.randint(1, 5))]
        steps, answer, bad = corrupt(rng, start, ops)
        good_answer = start + ops[0][1] - ops[1][1]
        text, verdict = check_text(steps, answer, ops, start)
        assert verdict == 0 and answer != good_answer
        assert text.count(" ok.") == bad and text.endswith("bad.")


def test_seed_corpus_mixes_solving_verifying_and_comparing():
    rows = seed_corpus(n=600, seed=1)
    kinds = {"solve": 0, "check1": 0, "check0": 0, "compare": 0}
    for r in rows:
        if r["prompt"].endswith("Check:"):
            v = parse_verification(r["completion"])
            kinds[f"check{v.value}"] += 1
        elif r["prompt"].endswith("Compare:"):
            assert parse_comparison(r["completion"]).ok
            kinds["compare"] += 1
        else:
            assert r["prompt"].endswith("A:") and extract_answer(r["completion"]) is not None
            kinds["solve"] += 1
    assert all(n > 20 for n in kinds.values()), kinds


def test_the_redo_check_redoes_each_result_and_stops_at_the_first_bad_step():
    rng = random.Random(1)
    for kind in ("arith", "carry", "answer"):
        for _ in range(100):
            start, ops = rng.randint(2, 30), [("+", rng.randint(1, 9)), ("-", rng.randint(1, 5))]
            steps, answer, bad = corrupt(rng, start, ops, kinds=(kind,))
            text, verdict = check_redo(steps, answer, start)
            assert verdict == 0 and answer != start + ops[0][1] - ops[1][1], (kind, steps, answer)
            assert text.count(" ok.") == bad and text.endswith("bad."), (kind, text)
            if kind == "carry":  # the step that does not start from the last result names it
                assert f" from {steps[bad - 1][3]} bad." in text
    good, _, _ = corrupt(rng, 7, [("+", 5), ("-", 3)], kinds=("answer",))
    text, verdict = check_redo(good, 9, 7)
    assert verdict == 1 and text == "7+5 is 12, says 12 ok. 12-3 is 9, says 9 ok. Answer is 9, says 9 ok."
    text, verdict = check_redo([(7, "+", 5, 12), (12, "-", 3, 8)], 8, 7)
    assert verdict == 0 and text.endswith("12-3 is 9, says 8 bad.")


def test_seed_corpus_refuses_an_unknown_check_and_the_redo_rows_parse():
    with pytest.raises(ValueError, match="check='steps'"):
        seed_corpus(n=5, check="steps")
    rows = seed_corpus(n=300, seed=2, check="redo")
    verdicts = [parse_verification(r["completion"]).value for r in rows if r["prompt"].endswith("Check:")]
    assert set(verdicts) == {0, 1}
    assert all(parse_comparison(r["completion"]).ok for r in rows if r["prompt"].endswith("Compare:"))
    assert seed_corpus(n=300, seed=2) != rows  # the default check is unchanged ("step")


def test_the_trace_check_judges_every_step_of_a_noisy_solution():
    rng = random.Random(3)
    ops = [("+", 5), ("-", 3)]
    text, verdict = check_trace([(7, "+", 5, 12), (12, "-", 3, 9)], 9, ops, 7)
    assert verdict == 1 and text == "7+5 is 12, says 12 ok. 12-3 is 9, says 9 ok. Answer is 9, says 9 ok."
    # a wrong result, then a step from another value, then a misread operand: each named, none skipped
    text, verdict = check_trace([(7, "+", 5, 13), (12, "-", 3, 9), (9, "+", 2, 11)], 11, ops + [("+", 4)], 7)
    assert verdict == 0 and text == ("7+5 is 12, says 13 bad. 12-3 from 13 bad. 9+2 asks +4 bad. "
                                     "Answer is 11, says 11 ok.")
    text, verdict = check_trace([(8, "+", 5, 13), (13, "-", 3, 10)], 10, ops, 7)
    assert verdict == 0 and text.startswith("8+5 from 7 bad.")
    for _ in range(300):  # a noisy solution always slips somewhere, and the check always finds it
        start = rng.randint(2, 30)
        steps, answer = noisy_solution(rng, start, ops)
        assert check_trace(steps, answer, ops, start)[1] == 0
        assert all(0 <= x for a, _, b, r in steps for x in (a, b, r))


def test_verdict_only_rows_judge_the_candidate_in_the_prompt_and_write_no_check():
    rows = seed_corpus(n=600, seed=4, check="verdict")
    checks = [r for r in rows if r["prompt"].endswith("Check:")]
    compares = [r for r in rows if r["prompt"].endswith("Compare:")]
    assert {r["completion"] for r in checks} == {" Verdict: 0", " Verdict: 1"}
    assert {r["completion"] for r in compares} == {" Verdict: 1", " Verdict: 2"}
    # the label is the candidate's: 1 exactly when every step follows the question and is right
    for r in checks:
        question, candidate = r["prompt"].removeprefix("Q: ").removesuffix("\nCheck:").split("\nA: ")
        value = int(re.search(r"has (\d+)", question).group(1))
        gold = []
        for verb, b in re.findall(r"(gets|buys|finds|wins|loses|sells|gives away|eats) (\d+)", question):
            op = "+" if verb in ("gets", "buys", "finds", "wins") else "-"
            gold.append(f"{value}{op}{b}={value + int(b) if op == '+' else value - int(b)}.")
            value = value + int(b) if op == "+" else value - int(b)
        right = candidate == " ".join(gold) + f" Answer: {value}"
        assert (r["completion"] == " Verdict: 1") == right, (question, candidate, r["completion"])
    ones = sum(r["completion"] == " Verdict: 1" for r in checks) / len(checks)
    assert 0.35 < ones < 0.65  # about half of the candidates are correct
