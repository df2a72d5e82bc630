"""summary.json files are strict JSON: a figure without a value is null, never a NaN literal."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from common.jsonio import dumps, strict, write_json


def _strict_load(text: str):
    def refuse(token):
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def test_non_finite_figures_become_null_at_any_depth(tmp_path):
    summary = {"auc": float("nan"), "ci": [np.float64("nan"), 0.25, np.float32(0.5)], "k": np.int64(3),
               "nested": {"spread": float("inf"), "ok": 1.5, "seeds": (np.nan, 2.0)}}
    write_json(tmp_path / "summary.json", summary)
    loaded = _strict_load((tmp_path / "summary.json").read_text())
    assert loaded == {"auc": None, "ci": [None, 0.25, 0.5], "k": 3,
                      "nested": {"spread": None, "ok": 1.5, "seeds": [None, 2.0]}}


def test_the_old_writer_wrote_what_strict_parsers_refuse():
    with pytest.raises(ValueError, match="not JSON: NaN"):
        _strict_load(json.dumps({"auc": math.nan}))
    assert _strict_load(dumps({"auc": math.nan})) == {"auc": None}
    assert strict("text") == "text" and strict(None) is None


def test_a_tpo_summary_with_a_figure_without_value_is_written_as_strict_json(tmp_path):
    from thinking import report

    entry = {"iteration": 0, "model_version": "v0", "score": math.nan, "win_rate_vs_seed": 0.5,
             "win_rate_vs_direct": None, "accuracy": None, "thought_len": 1.0, "response_len": 1.0,
             "unparsable_rate": 0.0, "rho": None, "pairs": None, "wall_s": None, "score_spread": np.float64("nan"),
             "win_rate_vs_seed_seeds": [0.5], "score_seeds": [math.nan]}
    report.write(tmp_path, {"iterations": [entry], "baselines": {"direct": []}, "arms": ["thought"]})
    loaded = _strict_load((tmp_path / "summary.json").read_text())
    assert loaded["iterations"][0]["score"] is None and loaded["iterations"][0]["score_spread"] is None


def test_a_nan_the_walk_cannot_see_fails_loudly_instead_of_being_written():
    with pytest.raises(ValueError, match="Out of range float"):
        dumps({"x": object()}, default=lambda o: math.nan)  # the encoder's hook runs after strict()


def test_only_numpy_scalars_are_unwrapped_and_files_are_indented_by_two(tmp_path):
    class Boxed:  # has an item() but is no number: left to the encoder, never called
        def item(self):
            raise AssertionError("strict() called item() on a non-numpy object")

    boxed = Boxed()
    assert strict([boxed])[0] is boxed
    write_json(tmp_path / "s.json", {"a": [1]})
    assert (tmp_path / "s.json").read_text() == '{\n  "a": [\n    1\n  ]\n}\n'
