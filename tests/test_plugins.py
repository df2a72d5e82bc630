"""common/plugins.py: what counts as an import path, and how a user's object is refused."""

from __future__ import annotations

import pytest

from common.config import ConfigError
from common.plugins import is_import_path, load_callable, load_object


@pytest.mark.parametrize("spec, expected", [
    ("examples.judges:ShortCorrectJudge", True), ("a:b.c", True),
    ("pairwise", False), (":Judge", False), ("examples.judges:", False), (":", False), ("", False),
])
def test_an_import_path_has_a_module_and_a_name(spec, expected):
    assert is_import_path(spec) is expected


@pytest.mark.parametrize("spec", [":exact_text", "examples.checkers:", "examples.checkers"])
def test_half_an_import_path_is_refused_with_an_example(spec):
    with pytest.raises(ConfigError, match=r"checker=.* must look like module:attr \(e\.g\. examples\.checkers:exact_text\)"):
        load_object("checker", spec, "examples.checkers:exact_text")


def test_a_dotted_attribute_is_followed():
    assert load_object("x", "examples.judges:ShortCorrectJudge.score", "e").__name__ == "score"


def test_keyword_arguments_are_bound_too():
    load_callable("x", "examples.judges:ShortCorrectJudge", "e", kwargs={"per_char": 0.1})
    with pytest.raises(ConfigError, match=r"called as ShortCorrectJudge\(per_chars=\.\.\.\)"):
        load_callable("x", "examples.judges:ShortCorrectJudge", "e", kwargs={"per_chars": 0.1})
