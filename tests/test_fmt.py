"""Log lines show numbers rounded to what they mean: 3 significant figures, rates in e-notation."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from common.fmt import delta, lr, metrics, num


@pytest.mark.parametrize("value, shown", [
    (0.6940104166666666, "0.694"),  # the issue's `[thought it2] v3: score 0.6940104166666666`
    (12.0, "12"), (1.0, "1"), (0.0, "0"), (3, "3"), (12345, "12,345"),
    (1234.5, "1,234"), (999.9, "1,000"), (99.95, "100"),
    (-0.0123456, "-0.0123"), (0.000123456, "0.000123"), (5e-07, "5e-07"),
    (float("nan"), "nan"), (True, "True"), ("v3", "v3"),
])
def test_num_rounds_to_three_significant_figures(value, shown):
    assert num(value) == shown


def test_learning_rates_keep_their_magnitude():
    # TRL's own log rounds to 4 decimal places: 5e-5 printed as 0.0 for a whole run
    assert lr(5e-05) == "5.0e-05" and lr(4.1666e-05) == "4.2e-05" and lr(0.0) == "0"
    assert metrics({"learning_rate": 5e-05}) == "learning_rate 5.0e-05"


def test_a_trainer_log_dict_is_one_readable_line():
    logs = {"loss": 0.693147, "grad_norm": 1.23456, "learning_rate": 2.5e-05, "epoch": 0.4, "num_tokens": 12345.0,
            "rewards/margins": 0.0001234}
    assert metrics(logs) == ("loss 0.693, grad_norm 1.23, learning_rate 2.5e-05, epoch 0.4, num_tokens 12,345, "
                             "rewards/margins 0.000123")


def test_delta_is_signed():
    assert (delta(0.0123), delta(-2.0), delta(0.0)) == ("+0.0123", "-2", "+0")


def test_the_trainer_callback_logs_rounded_numbers_and_the_learning_rate(caplog):
    from types import SimpleNamespace

    from training.common import LogCallback

    state = SimpleNamespace(is_world_process_zero=True, global_step=3, max_steps=10)
    with caplog.at_level(logging.INFO, logger="training.common"):
        LogCallback().on_log(None, state, None, logs={"loss": 0.6931471805599453, "learning_rate": 5e-05})
    assert caplog.messages == ["step 3/10: loss 0.693, learning_rate 5.0e-05"]


def test_a_tpo_iteration_is_one_line_with_what_changed():
    from thinking.loop import step_line

    before = {"iteration": 1, "model_version": "v1", "score": 0.6931, "accuracy": 0.6931, "win_rate_vs_seed": 0.7,
              "unparsable_rate": 0.01}
    now = {"iteration": 2, "model_version": "v3", "score": 0.6940104166666666, "accuracy": 0.6940104166666666,
           "win_rate_vs_seed": 0.71234, "win_rate_vs_direct": 0.654, "unparsable_rate": 0.0}
    assert step_line("thought", now, before) == ("thought iteration 2 (v3): accuracy 0.694 (+0.00091), "
                                                 "win rate vs seed 0.712 (+0.0123), vs direct 0.654, "
                                                 "unparsable 0 (-0.01)")


def test_a_soar_iteration_is_one_line_with_what_changed():
    from evolution.loop import iteration_line

    first = {"iteration": 0, "model_version": "v0", "solved": 7.0, "tasks": 19, "hit_rate": 0.0125,
             "search_hit_rate": 0.0121, "programs": 1216, "wall_s": 12.3456, "solved_seeds": [7, 8, 6, 9, 8],
             "heldout_solved_seeds": [8, 9, 8, 9, 9]}
    second = first | {"iteration": 1, "model_version": "v1", "solved": 8.5, "search_hit_rate": 0.01383333}
    assert iteration_line(second, first, 16) == (
        "iteration 1 (v1): solved 8.5/19 (+1.5), hit rate 0.0138 (+0.00173), 1,216 programs in 12.3 s; "
        "mean of 5 seeds: demo solved 7.6, held-out solved 8.6/16")


def test_a_soar_iteration_line_says_what_its_extra_tasks_gave():
    """Tasks searched for hindsight data only are never scored; the line still says whether any
    program was right on them (none: right-programs-only hindsight learns nothing from them)."""
    from evolution.loop import iteration_line

    entry = {"iteration": 0, "model_version": "v0", "solved": 4.0, "tasks": 19, "hit_rate": 0.0164,
             "programs": 1216, "wall_s": 588.0, "extra": {"tasks": 32, "oracle": 1.5, "programs": 2048}}
    assert iteration_line(entry, None, 16) == ("iteration 0 (v0): solved 4/19, hit rate 0.0164, 1,216 programs "
                                               "in 588 s; extra tasks: oracle 1.5/32 in 2,048 programs")


def test_the_deprecation_trl_triggers_is_ignored_in_ratchets_training_calls_only():
    import warnings

    from transformers import AutoModelForCausalLM

    from training.common import known_library_warnings_ignored

    model = AutoModelForCausalLM.from_pretrained(Path(__file__).resolve().parents[1] / "models" / "tpo-arith-seed")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with known_library_warnings_ignored():
            model.is_gradient_checkpointing  # noqa: B018 (what trl's disable_gradient_checkpointing reads)
        assert seen == []
        model.is_gradient_checkpointing  # noqa: B018 (outside: the filter is not process-wide)
    assert [w.category for w in seen] == [FutureWarning]
