"""The regex dialect vLLM's structured outputs accept, checked before a request is sent.

`SamplingParams.regex` is compiled with Python's `regex` module (the transformers engine's
constraint), but vLLM hands it to xgrammar (its default backend; guidance is the other),
whose regex parser rejects constructs Python accepts: lookaround, backreferences, named
groups, atomic groups, possessive quantifiers, inline flags, `\\b`, `\\p{..}`, `{,n}`. It
also reads `\\A`/`\\Z` as plain letters, with only a warning. A pattern that works on CPU
would then fail (or mean something else) on the GPU, so the vLLM engine checks it here:
with xgrammar itself where it is installed (it comes with vLLM), else with a scan for
those constructs. tests/test_vllm_engine.py checks that the scan agrees with xgrammar.
"""

from __future__ import annotations

import re
from functools import lru_cache

# Constructs xgrammar's regex parser rejects (or, for \A \Z \z, silently reads as letters),
# as (what it is, pattern that finds it outside a character class).
_UNSUPPORTED: list[tuple[str, re.Pattern]] = [
    ("a lookahead or lookbehind", re.compile(r"\(\?<?[=!]")),
    ("a named group", re.compile(r"\(\?(P?<[A-Za-z_]|P=|P>)")),
    ("an atomic group", re.compile(r"\(\?>")),
    ("an inline flag", re.compile(r"\(\?[aiLmsux-]+[:)]")),
    ("a conditional or recursion", re.compile(r"\(\?(\(|R\)|[0-9]+\)|&)")),
    ("a possessive quantifier", re.compile(r"(?<!\()[*+?}]\+")),
    ("a quantifier without a lower bound ({,n})", re.compile(r"\{,[0-9]*\}")),
]
_UNSUPPORTED_ESCAPES = {
    **{d: "a backreference" for d in "123456789"},
    "g": "a backreference", "k": "a backreference",
    "b": "a word boundary", "B": "a word boundary",
    "p": "a Unicode property class", "P": "a Unicode property class",
    "A": "an anchor xgrammar reads as a letter", "Z": "an anchor xgrammar reads as a letter",
    "z": "an anchor xgrammar reads as a letter", "G": "an anchor xgrammar reads as a letter",
    "K": "a match reset",
}


def _outside_classes(pattern: str) -> tuple[str, list[str]]:
    """The pattern with escapes and character classes blanked out, and the escaped letters
    seen outside classes (inside a class \\b is a backspace and ( is a letter)."""
    out: list[str] = []
    escapes: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            if not in_class:
                escapes.append(pattern[i + 1])
            out.append("__")
            i += 2
            continue
        if in_class:
            if c == "]" and out and out[-1] not in ("[", "[^"):
                in_class = False
                out.append("]")
            else:
                out.append("_")
            i += 1
            continue
        if c == "[":
            in_class = True
            if pattern[i + 1 : i + 2] == "^":
                out.append("[^")
                i += 2
                continue
        out.append(c)
        i += 1
    return "".join(out), escapes


def unsupported_construct(pattern: str) -> str | None:
    """What in `pattern` vLLM's regex backends cannot take, or None when nothing is found."""
    text, escapes = _outside_classes(pattern)
    for what, found in _UNSUPPORTED:
        if found.search(text):
            return what
    for letter in escapes:
        if letter in _UNSUPPORTED_ESCAPES:
            return f"{_UNSUPPORTED_ESCAPES[letter]} (\\{letter})"
    return None


def _xgrammar():
    try:
        import xgrammar
    except ImportError:
        return None
    return xgrammar


@lru_cache(maxsize=256)
def check_vllm_regex(pattern: str) -> None:
    """Raise ValueError naming SamplingParams.regex when vLLM's structured outputs cannot take
    `pattern`. Uses xgrammar's own parser when it is installed (with vLLM), else the scan."""
    what = unsupported_construct(pattern)
    if what is None and (xgr := _xgrammar()) is not None:
        try:
            xgr.Grammar.from_regex(pattern)
        except Exception as e:  # xgrammar raises RuntimeError carrying its parser's message
            what = f"a construct xgrammar's parser rejects ({str(e).strip().splitlines()[-1][:200]})"
    if what is not None:
        raise ValueError(
            f"SamplingParams.regex={pattern!r} uses {what}, which vLLM's structured outputs "
            "(xgrammar, guidance) do not accept; rewrite it without lookaround, backreferences, "
            "named or atomic groups, inline flags, possessive quantifiers, \\b or \\p{..}"
        )
