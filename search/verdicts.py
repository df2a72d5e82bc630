"""Sampling verdicts and comparisons in any of verifiers.verdicts' modes, no request sent twice.

    rows = await sample_verdicts(generate, prompts, ns, params, mode="reasoned", kind="verify")
    rows[i]   # ns[i] (code, probability) pairs for prompts[i]: code 1/0 (1/2), or -1 = unparsable;
              # probability of the first choice (None in mode "parsed")

The scaling sampler, the verification benchmark and `ratchet serve`'s search
(search/serve/service_search.py) all go through here, so the verdicts the curves replay, the
benchmark's and a served search's are decoded the same way.
"""

from __future__ import annotations

from dataclasses import replace

from common.sampling import MAX_LOGPROBS, Completion, Generate, Prompt, SamplingParams
from search.requests import generate_each
from verifiers.selfverify import verdict_code
from verifiers.verdicts import (
    REASONING_STOP,
    Kind,
    Mode,
    check_mode,
    choice_probability,
    choice_regex,
    constrained_verdict,
    parse_free,
    verdict_prompt,
)

Scored = tuple[int, float | None]  # (verdict code, probability of the first choice)
# Tokens of a constrained verdict: the space, the choice, and room for the end of turn.
VERDICT_TOKENS = 4
# Added to a batch's seed salt for the second (constrained) request of a reasoned verdict.
SECOND_STAGE_SALT = 7919


def constrained_params(params: SamplingParams, kind: Kind) -> SamplingParams:
    """The verdict step: the choice regex, its top logprobs, a few tokens, no stop strings."""
    return replace(params, regex=choice_regex(kind), logprobs=MAX_LOGPROBS, max_tokens=VERDICT_TOKENS, stop=())


def _scored(rows: list[list[Completion]], kind: Kind) -> list[list[Scored]]:
    return [[(verdict_code(constrained_verdict(c, kind)), choice_probability(c, kind)) for c in row] for row in rows]


async def sample_verdicts(generate: Generate, prompts: list[Prompt], ns: list[int], params: SamplingParams, *,
                          mode: Mode, kind: Kind, salt: int = 0) -> list[list[Scored]]:
    """ns[i] verdicts for prompts[i] (verification or comparison prompts of verifiers.selfverify).

    "parsed": params as given, free text parsed; "constrained": the prompt prefilled up to
    `Verdict:` and continued under the choice regex; "reasoned": free text first (params, stopped
    before a verdict line of its own), then each text continued under the regex (n = 1 each).
    """
    check_mode(mode)
    if mode == "parsed":
        rows = await generate_each(generate, prompts, ns, params, salt=salt)
        return [[(verdict_code(parse_free(c.text, kind)), None) for c in row] for row in rows]
    if mode == "constrained":
        rows = await generate_each(generate, [verdict_prompt(p) for p in prompts], ns,
                                   constrained_params(params, kind), salt=salt)
        return _scored(rows, kind)
    free = await generate_each(generate, prompts, ns, replace(params, stop=tuple(params.stop) + REASONING_STOP),
                               salt=salt)
    second = [verdict_prompt(p, c.text) for p, row in zip(prompts, free, strict=True) for c in row]
    flat = iter(await generate_each(generate, second, [1] * len(second), constrained_params(params, kind),
                                    salt=salt + SECOND_STAGE_SALT))
    return _scored([[c for _ in row for c in next(flat)] for row in free], kind)
