"""The judges by name: `make_judge("programmatic", ...)`.

The factory sits above the judges and their interface (base.py): each judge imports base,
and only this module imports the judges, so the import graph has no circle.
"""

from __future__ import annotations

from typing import Any

from verifiers.judges.base import Judge


def _programmatic(**kw: Any) -> Judge:
    from verifiers.judges.programmatic import ProgrammaticJudge

    return ProgrammaticJudge(**kw)


def _reward_model(**kw: Any) -> Judge:
    from verifiers.judges.reward_model import RewardModelJudge

    return RewardModelJudge(**kw)


def _pairwise(**kw: Any) -> Judge:
    from verifiers.judges.pairwise import PairwiseJudge

    return PairwiseJudge(**kw)


# name -> factory(**kwargs); imported on use (the reward model pulls in torch).
JUDGES = {"programmatic": _programmatic, "reward_model": _reward_model, "pairwise": _pairwise}


def make_judge(name: str, **kwargs: Any) -> Judge:
    """The judge called `name`; raises ValueError listing the known names."""
    if name not in JUDGES:
        raise ValueError(f"judge {name!r} is unknown; choose one of {sorted(JUDGES)}")
    return JUDGES[name](**kwargs)
