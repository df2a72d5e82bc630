"""Preference pairs with length control: best vs worst by z(score) - rho * z(length).

    rho = choose_rho(groups, PairsConfig())
    pairs, counts = build_pairs(groups, rho, PairsConfig())   # TRL prompt/chosen/rejected rows

A group is one instruction's K samples. Scores and lengths are z-normalised within the
group; rho is the smallest value on a grid over [0, rho_max] for which the chosen
responses are on average not longer than the rejected ones (rho_max when none is). A group
whose parsed samples all score the same gives no pair (there is no preference to learn).
Unparsable outputs join as rejected (chosen: the group's best), capped at
`unparsable_share` of all pairs. The thought stays inside chosen and rejected: a pair
holds the whole completion the model wrote.

With `divergence_words` > 0, `trl_rows` trains on the first point where chosen and rejected
differ instead: their common prefix joins the prompt and each keeps that many words from
there. Full sequences push down every token of the rejected sample after the divergence,
including steps it got right from a value it got wrong; the window keeps only the first
difference (the label still comes from the judged responses alone).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from common.sampling import is_prefilled


@dataclass
class PairsConfig:
    rho_max: float = 0.5  # length-control weight range [0, rho_max] (paper: 0.5)
    rho_steps: int = 11  # grid points searched in [0, rho_max]
    unparsable_share: float = 0.1  # at most this share of the pairs has an unparsable rejected (paper: ~10%)
    length_of: str = "response"  # length control on the response (the judged part) or the "completion"
    # > 0: DPO on the first point where chosen and rejected differ, this many words of each (the
    # common prefix joins the prompt); 0: whole completions, as the paper trains
    divergence_words: int = 0

    def __post_init__(self):
        if not 0 <= self.rho_max <= 0.5:
            raise ValueError(f"pairs.rho_max={self.rho_max} must be in [0, 0.5]")
        if self.rho_steps < 2:
            raise ValueError(f"pairs.rho_steps={self.rho_steps} must be >= 2")
        if not 0 <= self.unparsable_share < 1:
            raise ValueError(f"pairs.unparsable_share={self.unparsable_share} must be in [0, 1)")
        if self.divergence_words < 0:
            raise ValueError(f"pairs.divergence_words={self.divergence_words} must be >= 0 (0: whole completions)")
        if self.length_of not in ("response", "completion"):
            raise ValueError(f"pairs.length_of={self.length_of!r} must be 'response' or 'completion'")


@dataclass
class Sample:
    """One judged output. `completion` is what the model wrote (thought included)."""

    completion: str
    thought: str
    response: str
    parsed: bool
    score: float | None = None  # None: unparsable, or the judge failed on it
    judge_error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Sample:
        return cls(**d)


@dataclass
class Group:
    instruction_id: str
    prompt: Any  # the prompt the samples answered (str or chat messages)
    samples: list[Sample]


def _z(x: np.ndarray) -> np.ndarray:
    sd = x.std()
    return np.zeros_like(x) if sd == 0 else (x - x.mean()) / sd


def _scored(g: Group) -> list[Sample]:
    return [s for s in g.samples if s.parsed and s.score is not None]


def _length(s: Sample, cfg: PairsConfig) -> int:
    return len(s.response if cfg.length_of == "response" else s.completion)


def pick(g: Group, rho: float, cfg: PairsConfig) -> tuple[Sample, Sample] | None:
    """(chosen, rejected) among the group's scored samples, or None when they all score the same."""
    scored = _scored(g)
    scores = np.array([s.score for s in scored], dtype=float)
    if len(scored) < 2 or np.all(scores == scores[0]):
        return None
    lengths = np.array([_length(s, cfg) for s in scored], dtype=float)
    lc = _z(scores) - rho * _z(lengths)
    # ties in lc: the first of the top and the last of the bottom, so chosen != rejected
    best, worst = int(np.argmax(lc)), len(lc) - 1 - int(np.argmin(lc[::-1]))
    if best == worst:
        return None
    return scored[best], scored[worst]


def choose_rho(groups: list[Group], cfg: PairsConfig) -> float:
    """The smallest rho whose chosen responses are on average not longer than the rejected ones."""
    grid = np.linspace(0.0, cfg.rho_max, cfg.rho_steps)
    for rho in grid:
        picks = [p for g in groups if (p := pick(g, float(rho), cfg)) is not None]
        if not picks:
            return float(rho)
        if np.mean([_length(c, cfg) for c, _ in picks]) <= np.mean([_length(r, cfg) for _, r in picks]):
            return float(rho)
    return float(cfg.rho_max)


def build_pairs(groups: list[Group], rho: float, cfg: PairsConfig) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """TRL prompt/chosen/rejected rows, and counts (pairs, ties, unparsable pairs, lengths)."""
    pairs: list[dict[str, Any]] = []
    ties, chosen_len, rejected_len = 0, [], []
    for g in groups:
        p = pick(g, rho, cfg)
        if p is None:
            ties += 1 if len(_scored(g)) >= 2 else 0
            continue
        c, r = p
        pairs.append({"prompt": g.prompt, "chosen": c.completion, "rejected": r.completion,
                      "instruction_id": g.instruction_id, "kind": "scored"})
        chosen_len.append(_length(c, cfg))
        rejected_len.append(_length(r, cfg))
    # unparsable as rejected: at most share/(1-share) of the scored pairs, so they are <= share of all
    cap = int(np.floor(cfg.unparsable_share / (1 - cfg.unparsable_share) * len(pairs) + 1e-9))
    extra: list[dict[str, Any]] = []
    candidates = 0
    for g in groups:
        bad = [s for s in g.samples if not s.parsed]
        scored = _scored(g)
        if not bad or not scored:
            continue
        candidates += 1
        if len(extra) >= cap:
            continue
        best = max(scored, key=lambda s: s.score)
        extra.append({"prompt": g.prompt, "chosen": best.completion, "rejected": bad[0].completion,
                      "instruction_id": g.instruction_id, "kind": "unparsable"})
    judged = [s for g in groups for s in g.samples if s.parsed]
    failed = Counter(s.judge_error.removeprefix("judge: ") or "no score" for s in judged if s.score is None)
    counts = {
        "pairs": len(pairs) + len(extra), "scored_pairs": len(pairs), "unparsable_pairs": len(extra),
        "unparsable_candidates": candidates, "ties": ties, "rho": rho, "groups": len(groups),
        "judged": len(judged), "judge_failed": sum(failed.values()), "judge_errors": dict(failed),
        "chosen_len": float(np.mean(chosen_len)) if chosen_len else None,
        "rejected_len": float(np.mean(rejected_len)) if rejected_len else None,
    }
    return pairs + extra, counts


def no_rows_reason(counts: dict[str, Any], where: str, windows_dropped: bool) -> str:
    """Why a round has nothing to train on, blaming the judge when its verdicts were the problem
    (every verdict failed, or every group tied) and the policy's outputs otherwise."""
    judged, failed, ties = counts.get("judged", 0), counts.get("judge_failed", 0), counts.get("ties", 0)
    if judged and failed == judged:
        errors = ", ".join(f"{e}: {n}" for e, n in sorted(counts.get("judge_errors", {}).items()))
        return (f"{where} the judge gave no usable verdict: {failed} of {judged} judged responses failed ({errors}); "
                f"{ties} tied groups. Check the judge (judge.kind, judge.kwargs: a pairwise judge's template and "
                "regex, docs/tpo.md) and, for a served judge, that the server answers with a verdict; then start a "
                "new experiment (this one stored the failed verdicts)")
    if judged and ties and not counts.get("scored_pairs"):
        return (f"{where} the judge scored every response of each instruction alike: {ties} tied groups of "
                f"{counts.get('groups')}, {failed} of {judged} verdicts failed; nothing to prefer (a pairwise judge that "
                "always picks the same position ties every pair: it is asked both orders). Use a judge that "
                "separates responses, or raise sample.k or sample.temperature for more varied ones")
    return (f"{where} no DPO rows: {counts.get('pairs', 0)} pairs, {ties} tied groups, "
            f"{counts.get('unparsable_candidates', 0)} unparsable outputs, {failed} of {judged} verdicts failed"
            f"{' (pairs.divergence_words dropped pairs whose windows do not differ)' if windows_dropped else ''}; "
            "nothing to train on. Check that the model writes both markers (prompt.style, "
            "prompt.prefill_thought_marker), raise sample.k or sample.temperature, or change the judge")


def at_divergence(prompt: str, chosen: str, rejected: str, words: int) -> tuple[str, str, str] | None:
    """(prompt + common prefix, `words` words of chosen, of rejected) from the start of the word in
    which they first differ; None when the windows come out equal or one is empty."""
    same = len(os.path.commonprefix([chosen, rejected]))
    cut = max((m.end() for m in re.finditer(r"\s", chosen[:same])), default=0)  # the diverging word's start

    def window(text: str) -> str:
        return "".join(re.findall(r"\S+\s*", text[cut:])[:words]).rstrip()

    c, r = window(chosen), window(rejected)
    if not c or not r or c == r:
        return None
    return prompt + chosen[:cut], c, r


def trl_rows(pairs: list[dict[str, Any]], divergence_words: int = 0) -> list[dict[str, Any]]:
    """Only TRL's columns (plain text prompts; chat prompts become conversational rows), whole
    completions or, with `divergence_words`, the window at their first difference (see above)."""
    out = []
    for p in pairs:
        if divergence_words:
            if not isinstance(p["prompt"], str):
                raise ValueError("pairs.divergence_words needs plain-text prompts (prompt.style: plain)")
            cut = at_divergence(p["prompt"], p["chosen"], p["rejected"], divergence_words)
            if cut is not None:
                out.append(dict(zip(("prompt", "chosen", "rejected"), cut, strict=True)))
        elif isinstance(p["prompt"], list):
            # TRL's conversational rows: a prefilled start of the answer (the thought marker) goes
            # back into each assistant message, whose tokens are the ones the model was sampled at
            messages, start = p["prompt"], ""
            if is_prefilled(messages):
                messages, start = messages[:-1], messages[-1]["content"]
            out.append({"prompt": messages, "chosen": [{"role": "assistant", "content": start + p["chosen"]}],
                        "rejected": [{"role": "assistant", "content": start + p["rejected"]}]})
        else:
            out.append({"prompt": p["prompt"], "chosen": p["chosen"], "rejected": p["rejected"]})
    return out
