"""Verdicts that always parse: the verdict decoded under a regex, and its probability.

Free-text verdicts (verifiers.selfverify.parse_*) are lost whenever the model forgets the
`Verdict:` line (94% of SmolLM2-135M-Instruct's at temperature 0.7). Here the verdict is a
decoding step of its own: the verification (or comparison) prompt with the answer prefilled up to
`Verdict:`, continued under `SamplingParams.regex` (` [01]`, or ` [12]` for a comparison), which
every engine honours (vLLM's structured outputs, the transformers engine's regex logits
processor, a vLLM server's `structured_outputs`). A verdict is then 0/1 (1/2) by construction.
The probability of one choice against the other at the verdict token, read from the completion's
logprobs, can score a candidate where the paper averages binary samples.

Modes (ScalingConfig.verdict; search.verdicts samples them):
- "parsed": free text, parsed afterwards (the paper's way; unparsable verdicts are stored so);
- "constrained": the verdict alone, straight after the prompt (no written check);
- "reasoned": free text first (the rewrite-and-scan, stopped before its own verdict line), then
  the constrained verdict as its continuation: two requests per verdict.
"""

from __future__ import annotations

import math
from typing import Literal

from common.sampling import Completion, Prompt, prefilled
from verifiers.selfverify import Verdict, parse_comparison, parse_verification

Mode = Literal["parsed", "constrained", "reasoned"]
MODES: tuple[str, ...] = ("parsed", "constrained", "reasoned")
Kind = Literal["verify", "compare"]
# The verdict's values per question kind; the first is the one whose probability is the score
# (verification: P(1 = correct); comparison: P(1 = the first response is the correct one)).
CHOICES: dict[str, tuple[str, str]] = {"verify": ("1", "0"), "compare": ("1", "2")}
PREFIX = "Verdict:"
# Where the free reasoning of "reasoned" stops: before it writes a verdict line of its own.
REASONING_STOP = ("Verdict",)


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"verdict mode {mode!r} is unknown; choose one of {list(MODES)}")


def choice_regex(kind: Kind) -> str:
    """The constrained continuation of `Verdict:`: a space and one choice (` [01]`, ` [12]`).

    The space is in the pattern, not the prefill: chat templates strip a prefill's trailing
    whitespace (transformers' continue_final_message), and SmolLM2 writes "Verdict: 1" as
    `:`, ` `, `1`, so the choice is one token of its own."""
    return " [" + "".join(sorted(CHOICES[kind])) + "]"


def verdict_prompt(prompt: Prompt, reasoning: str = "") -> Prompt:
    """`prompt` with the answer written up to `Verdict:` (after `reasoning`, if any), to be continued
    under choice_regex. Chat prompts get it as a prefilled assistant message; plain-text (compact)
    prompts as more text."""
    head = reasoning.strip()
    text = f"{head}\n{PREFIX}" if head else PREFIX
    if isinstance(prompt, str):
        return f"{prompt} {text}"
    return prefilled(prompt, text)


def constrained_verdict(completion: Completion, kind: Kind) -> Verdict:
    """The choice a constrained continuation took; anything else means the constraint was not honoured
    (raised, never stored as a guess or as unparsable)."""
    value = completion.text.strip()
    if value not in CHOICES[kind]:
        raise RuntimeError(f"a {kind} verdict constrained to {choice_regex(kind)!r} came back as "
                           f"{completion.text!r}: the engine did not honour SamplingParams.regex")
    return Verdict(int(value), "ok")


def choice_probability(completion: Completion, kind: Kind) -> float | None:
    """P(first choice) / P(either choice) at the verdict token, from the completion's logprobs.

    The verdict token is the first one whose text (stripped) is a choice; both choices' logprobs
    are looked up among its top logprobs (a token spelled with a leading space counts as the
    choice too). A choice missing from them is taken as impossible. None without logprobs or
    without a verdict token.
    """
    if not completion.logprobs:
        return None
    first, second = CHOICES[kind]
    for entry in completion.logprobs:
        if entry["token"].strip() not in (first, second):
            continue
        mass = {first: 0.0, second: 0.0}
        tops = entry.get("top_logprobs") or []
        for top in tops or [entry]:
            name = top["token"].strip()
            if name in mass and top["logprob"] is not None and top["logprob"] > -math.inf:
                mass[name] += math.exp(top["logprob"])
        if entry["token"] not in {t["token"] for t in tops}:  # the sampled token is always possible
            mass[entry["token"].strip()] += math.exp(entry["logprob"])
        total = mass[first] + mass[second]
        return mass[first] / total if total > 0 else None
    return None


def parse_free(text: str, kind: Kind) -> Verdict:
    """A free-text verdict (mode "parsed"), parsed as verifiers.selfverify does."""
    return parse_verification(text) if kind == "verify" else parse_comparison(text)
