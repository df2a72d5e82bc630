"""Own judges a user could write, named by import path (`judge.kind=_judges:Name`) in tests."""

from __future__ import annotations

from verifiers.judges import Verdict


class EveryVerdictFails:
    """A judge whose every verdict failed, as a served LLM judge's are when it never writes A or B."""

    name = "every-verdict-fails"

    async def score(self, items):
        return [Verdict(None, False, "unparsable verdict") for _ in items]


class NotAJudge:
    """Has no `async score`."""

    def score(self, items):
        return []
