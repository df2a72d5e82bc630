"""thinking/pairs.py at its edges: config bounds, rho at the ends of its grid, ties, the cap on
unparsable pairs, which samples pair up, and the rows TRL gets. Written against the survivors
of `make mutate MODULES=pairs` (docs/testing.md)."""

from __future__ import annotations

import pytest

from thinking.pairs import (
    Group,
    PairsConfig,
    Sample,
    at_divergence,
    build_pairs,
    choose_rho,
    no_rows_reason,
    pick,
    trl_rows,
)


def S(score, response="x", *, completion=None, parsed=True) -> Sample:
    return Sample(completion=completion or f"T {response}", thought="T", response=response, parsed=parsed,
                  score=score if parsed else None)


def BAD(completion: str) -> Sample:
    return S(None, parsed=False, completion=completion)


@pytest.mark.parametrize("field,value", [("rho_max", 0.0), ("rho_max", 0.5), ("rho_steps", 2),
                                         ("unparsable_share", 0.0), ("divergence_words", 0)])
def test_config_accepts_the_ends_of_each_range(field, value):
    assert getattr(PairsConfig(**{field: value}), field) == value


@pytest.mark.parametrize("field,value", [("rho_max", -0.1), ("rho_max", 0.51), ("rho_steps", 1),
                                         ("unparsable_share", 1.0), ("unparsable_share", -0.1),
                                         ("divergence_words", -1), ("length_of", "thought")])
def test_config_refuses_values_outside_naming_the_field(field, value):
    with pytest.raises(ValueError, match=f"pairs.{field}"):
        PairsConfig(**{field: value})


def test_rho_is_zero_when_chosen_and_rejected_are_as_long_on_average():
    groups = [Group("a", "p", [S(1.0, "x" * 10), S(0.0, "x" * 20)]),
              Group("b", "p", [S(1.0, "x" * 20), S(0.0, "x" * 10)])]
    assert choose_rho(groups, PairsConfig()) == 0.0


def test_rho_is_zero_when_no_group_gives_a_pair():
    assert choose_rho([Group("a", "p", [S(1.0), S(1.0)])], PairsConfig()) == 0.0


def test_rho_is_rho_max_when_no_value_makes_chosen_shorter():
    # two samples: z-scores are +-1 on both axes, so rho <= 0.5 never outweighs the score
    groups = [Group("a", "p", [S(1.0, "x" * 40), S(0.0, "x" * 5)])]
    assert choose_rho(groups, PairsConfig(rho_max=0.4)) == 0.4


def test_of_equally_bad_samples_the_last_is_rejected():
    # the rule in pick(): ties in lc go to the first of the top and the last of the bottom
    g = Group("a", "p", [S(1.0, "a"), S(0.0, "b"), S(0.0, "c")])
    chosen, rejected = pick(g, 0.0, PairsConfig())
    assert (chosen.response, rejected.response) == ("a", "c")


def test_ties_count_groups_of_two_or_more_scored_samples_that_all_score_the_same():
    groups = [Group("tie2", "p", [S(0.5), S(0.5)]), Group("one", "p", [S(0.5), BAD("?")]),
              Group("pair", "p", [S(1.0), S(0.0)])]
    _, counts = build_pairs(groups, 0.0, PairsConfig())
    assert counts["ties"] == 1 and counts["scored_pairs"] == 1


def test_unparsable_share_is_a_floor_that_holds_at_exact_multiples():
    # 41 scored pairs at share 0.18: 0.18 / 0.82 * 41 = 9 (8.999... in floating point): 9 of 50 pairs
    groups = [Group(f"g{i}", "p", [S(1.0, "good"), S(0.0, "bad"), BAD("junk")]) for i in range(41)]
    pairs, counts = build_pairs(groups, 0.0, PairsConfig(unparsable_share=0.18))
    assert counts["unparsable_pairs"] == 9 and counts["pairs"] == 50


def test_unparsable_pairs_take_the_best_scored_and_the_first_unparsable():
    g = Group("a", "p", [S(0.2, "meh"), S(0.9, "best"), S(0.5, "ok"), BAD("junk1"), BAD("junk2")])
    groups = [g] + [Group(f"g{i}", "p", [S(1.0), S(0.0)]) for i in range(9)]
    pairs, _ = build_pairs(groups, 0.0, PairsConfig(unparsable_share=0.1))
    [extra] = [p for p in pairs if p["kind"] == "unparsable"]
    assert (extra["chosen"], extra["rejected"]) == ("T best", "junk1")


def test_a_group_of_unparsable_outputs_only_gives_nothing():
    groups = [Group("bad", "p", [BAD("a"), BAD("b")])] + [Group(f"g{i}", "p", [S(1.0), S(0.0)]) for i in range(9)]
    pairs, counts = build_pairs(groups, 0.0, PairsConfig(unparsable_share=0.5))
    assert counts["unparsable_candidates"] == 0 and all(p["instruction_id"] != "bad" for p in pairs)


def test_no_pairs_report_no_lengths():
    _, counts = build_pairs([Group("a", "p", [S(1.0), S(1.0)])], 0.0, PairsConfig())
    assert counts["chosen_len"] is None and counts["rejected_len"] is None


def test_trl_rows_keep_chat_prompts_conversational_and_plain_prompts_plain():
    chat = [{"role": "user", "content": "hi"}]
    rows = trl_rows([{"prompt": chat, "chosen": "a", "rejected": "b", "kind": "scored"},
                     {"prompt": "plain", "chosen": "c", "rejected": "d", "kind": "scored"}])
    assert rows == [{"prompt": chat, "chosen": [{"role": "assistant", "content": "a"}],
                     "rejected": [{"role": "assistant", "content": "b"}]},
                    {"prompt": "plain", "chosen": "c", "rejected": "d"}]


def test_divergence_windows_start_at_the_diverging_word_and_hold_that_many_words():
    cut = at_divergence("P:", " a b c1 d e f", " a b c2 d e f", 2)
    assert cut == ("P: a b ", "c1 d", "c2 d")


def test_by_default_dpo_trains_on_whole_completions_as_the_paper_does():
    pair = {"prompt": "P:", "chosen": " a b c1 d", "rejected": " a b c2 d", "kind": "scored"}
    assert trl_rows([pair], PairsConfig().divergence_words) == [{"prompt": "P:", "chosen": " a b c1 d",
                                                                  "rejected": " a b c2 d"}]


def test_a_divergence_in_the_first_word_leaves_the_prompt_alone():
    assert at_divergence("Q: ", "Paris is big", "Rome is big", 2) == ("Q: ", "Paris is", "Rome is")


def test_no_window_when_one_side_ends_where_they_diverge():
    # the chosen text stops at the diverging word: an empty window is no preference
    assert at_divergence("Q:", " A B ", " A B C", 2) is None
    assert at_divergence("Q:", " A B C", " A B ", 2) is None


def test_a_prefilled_thought_marker_goes_back_into_each_assistant_message():
    from common.sampling import PREFILL

    chat = [{"role": "system", "content": "Think first."}, {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "Thought:", PREFILL: True}]
    [row] = trl_rows([{"prompt": chat, "chosen": " 4. Answer: 4", "rejected": " 5. Answer: 5", "kind": "scored"}])
    assert row == {"prompt": chat[:2], "chosen": [{"role": "assistant", "content": "Thought: 4. Answer: 4"}],
                   "rejected": [{"role": "assistant", "content": "Thought: 5. Answer: 5"}]}


def test_scores_spread_by_exactly_one_still_rank_the_samples():
    # scores 0 and 2 have a standard deviation of exactly 1: still a preference for 2
    chosen, rejected = pick(Group("a", "p", [S(0.0, "low"), S(2.0, "high")]), 0.0, PairsConfig())
    assert (chosen.response, rejected.response) == ("high", "low")


def test_samples_of_equal_length_rank_by_score_at_any_rho():
    # equal lengths have no spread to normalise: their z is 0, never a division by zero
    g = Group("a", "p", [S(1.0, "aa"), S(3.0, "bb"), S(2.0, "cc")])
    chosen, rejected = pick(g, 0.5, PairsConfig())
    assert (chosen.response, rejected.response) == ("bb", "aa")


def test_a_response_the_judge_failed_on_is_neither_chosen_nor_rejected():
    failed = Sample(completion="T lost", thought="T", response="lost", parsed=True, score=None, judge_error="judge: timeout")
    chosen, rejected = pick(Group("a", "p", [failed, S(1.0, "one"), S(2.0, "two")]), 0.0, PairsConfig())
    assert (chosen.response, rejected.response) == ("two", "one")
    _, counts = build_pairs([Group("b", "p", [failed, S(1.0)])], 0.0, PairsConfig())
    assert counts["ties"] == 0 and counts["judge_failed"] == 1  # one scored sample: no pair, no tie


def test_every_group_with_an_unparsable_output_is_counted_past_the_cap():
    groups = [Group(f"g{i}", "p", [S(1.0), S(0.0), BAD("junk")]) for i in range(3)]
    pairs, counts = build_pairs(groups, 0.0, PairsConfig(unparsable_share=0.0))
    assert counts["unparsable_pairs"] == 0 and counts["unparsable_candidates"] == 3


def test_a_group_without_unparsable_outputs_does_not_end_the_search_for_them():
    groups = [Group("clean", "p", [S(1.0), S(0.0)]), Group("messy", "q", [S(1.0), S(0.0), BAD("junk")])]
    pairs, counts = build_pairs(groups, 0.0, PairsConfig(unparsable_share=0.5))
    assert counts["unparsable_candidates"] == 1
    assert [(r["prompt"], r["rejected"]) for r in pairs if r["kind"] == "unparsable"] == [("q", "junk")]


# --- why a round has nothing to train on (thinking.pairs.no_rows_reason) ---------------------------
POLICY_HINT = ("nothing to train on. Check that the model writes both markers (prompt.style, "
               "prompt.prefill_thought_marker), raise sample.k or sample.temperature, or change the judge")


def test_counts_stored_before_the_judge_counts_give_the_policy_reason_with_zeros():
    assert no_rows_reason({}, "[thought it0]", windows_dropped=False) == (
        "[thought it0] no DPO rows: 0 pairs, 0 tied groups, 0 unparsable outputs, 0 of 0 verdicts failed; "
        + POLICY_HINT)
    assert no_rows_reason({"pairs": 2}, "[x]", windows_dropped=True).startswith(
        "[x] no DPO rows: 2 pairs, 0 tied groups, 0 unparsable outputs, 0 of 0 verdicts failed "
        "(pairs.divergence_words dropped pairs whose windows do not differ); ")


@pytest.mark.parametrize("counts", [
    {"judged": 6, "judge_failed": 2, "ties": 0, "scored_pairs": 0},  # some verdicts, no ties: the policy's
    {"judged": 0, "ties": 0, "scored_pairs": 0},  # nothing parsed, nothing judged
    {"judged": 6, "ties": 2, "scored_pairs": 1},  # pairs were scored: windows dropped them
])
def test_the_judge_is_blamed_only_when_its_verdicts_were_the_problem(counts):
    assert "no DPO rows" in no_rows_reason(counts, "[x]", windows_dropped=False)


def test_all_failed_and_all_tied_blame_the_judge():
    failed = no_rows_reason({"judged": 4, "judge_failed": 4, "judge_errors": {"unparsable verdict": 3, "nan score": 1},
                             "ties": 0}, "[x]", windows_dropped=False)
    assert failed.startswith("[x] the judge gave no usable verdict: 4 of 4 judged responses failed "
                             "(nan score: 1, unparsable verdict: 3); 0 tied groups.")
    tied = no_rows_reason({"judged": 4, "judge_failed": 0, "ties": 2, "groups": 2, "scored_pairs": 0}, "[x]",
                          windows_dropped=False)
    assert tied.startswith("[x] the judge scored every response of each instruction alike: 2 tied groups of 2, "
                           "0 of 4 verdicts failed")
