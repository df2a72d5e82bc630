"""Regexes in the dialect of vLLM's structured-output backends: constructs they reject are found
before a request is sent (search/engines/regex_dialect.py), and the demos' patterns pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from search.engines.regex_dialect import check_vllm_regex, unsupported_construct

# --- the regex dialect of vLLM's structured outputs ----------------------------------

UNSUPPORTED = [r"(?=a)a", r"(?!b)a", r"(?<=a)b", r"(?<!a)b", r"(a)\1", r"(?P<x>a)(?P=x)", r"(?P<n>a)",
               r"(?>a+)", r"a++", r"a*+", r"(?i)abc", r"\p{L}+", r"a{,3}", r"\bfoo\b", r"\Aabc\Z"]
SUPPORTED = ["( [0-4]){2,3}", "a+", r"\d+", r"\w+\s", "^abc$", "[[:alpha:]]", "a|", "(?:a)?", r"[^\n]+", ".*",
             r"[(?=]+", r"[\b]", r"\(\?=", "a+?", "[a-z]{2,}"]


@pytest.mark.parametrize("pattern", UNSUPPORTED)
def test_scan_finds_constructs_vllms_backends_reject(pattern):
    assert unsupported_construct(pattern) is not None
    with pytest.raises(ValueError, match="SamplingParams.regex="):
        check_vllm_regex(pattern)


@pytest.mark.parametrize("pattern", SUPPORTED)
def test_scan_passes_plain_patterns(pattern):
    assert unsupported_construct(pattern) is None
    check_vllm_regex(pattern)


def _demo_patterns() -> list[str]:
    """The patterns the SOAR demo samples under: the DSL body grammar for each task's colours."""
    import yaml

    from evolution.programs import body_regex, colours
    from evolution.tasks import load_split, select

    demo = yaml.safe_load((Path(__file__).parent.parent / "configs" / "soar-demo.yaml").read_text())["tasks"]
    tasks = select(load_split(demo["split"]), ids=list(demo["ids"]) + list(demo["heldout_ids"]))
    shown = [[ex.input for ex in t.train + t.test] + [ex.output for ex in t.train] for t in tasks.values()]
    return sorted({body_regex()} | {body_regex(colours=colours(grids)) for grids in shown})


def test_the_demos_patterns_are_in_vllms_dialect():
    patterns = _demo_patterns()
    assert len(patterns) > 5
    for p in patterns:
        assert unsupported_construct(p) is None, p
        check_vllm_regex(p)  # with xgrammar's parser where xgrammar is installed


def test_scan_agrees_with_xgrammar():
    """The scan is the CPU fallback of xgrammar's own parser: they must agree (xgrammar reads
    \\A and \\Z as letters with a warning, which the scan rejects on purpose)."""
    xgr = pytest.importorskip("xgrammar")

    def accepts(p: str) -> bool:
        try:
            xgr.Grammar.from_regex(p)
        except Exception:
            return False
        return True

    assert [p for p in UNSUPPORTED if accepts(p)] == [r"\Aabc\Z"]
    assert [p for p in SUPPORTED + _demo_patterns() if not accepts(p)] == []
