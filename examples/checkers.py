"""Answer checkers to plug into the scaling job (`checker=examples.checkers:exact_text`).

A checker is called as f(answer, reference) -> bool: `answer` is a candidate's final answer as
the extractor found it (the last \\boxed{}, else an `Answer:` line, else the last number; a
candidate without one is wrong and never reaches the checker), `reference` the dataset's
`answer` field. docs/configuration.md (Plug-in points) shows the command line.
"""

from __future__ import annotations


def exact_text(answer: str, reference: str) -> bool:
    """The same text up to case and spacing ("12.0" does not pass for "12"): for string answers
    ("Paris", "O(n log n)"), which math-verify's parser would read as products of symbols."""
    return " ".join(answer.split()).casefold() == " ".join(reference.split()).casefold()
