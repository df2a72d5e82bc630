"""Sending verification requests so that no two are identical.

On a seeded engine (vLLM) two identical requests (same prompt, same seed) return the same
completion, so repeated comparisons of one pair, or the verdicts of two candidates with the
same text, would be counted as independent samples when they are one. Each distinct prompt
is sent once with n summed over its repeats (an engine's n samples of one request differ),
and each batch gets its own seed.
"""

from __future__ import annotations

import json
from dataclasses import replace

from common.sampling import Completion, Generate, Prompt, SamplingParams


def _key(prompt: Prompt) -> str:
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True)


def seed_for(params: SamplingParams, salt: int) -> int | None:
    """A seed of its own for each batch (None stays None: fresh randomness)."""
    return None if params.seed is None else params.seed * 1_000_003 + salt


async def generate_each(generate: Generate, prompts: list[Prompt], ns: list[int], params: SamplingParams,
                        salt: int = 0) -> list[list[Completion]]:
    """ns[i] completions for prompts[i], identical prompts merged into one request."""
    total: dict[str, int] = {}
    first: dict[str, Prompt] = {}
    for p, n in zip(prompts, ns, strict=True):
        if n > 0:
            total[_key(p)] = total.get(_key(p), 0) + n
            first.setdefault(_key(p), p)
    by_n: dict[int, list[str]] = {}
    for key, n in total.items():
        by_n.setdefault(n, []).append(key)
    got: dict[str, list[Completion]] = {}
    for b, (n, keys) in enumerate(sorted(by_n.items())):
        rows = await generate([first[k] for k in keys], replace(params, n=n, seed=seed_for(params, salt + b)))
        got.update(zip(keys, (list(r) for r in rows), strict=True))
    out = []
    for p, n in zip(prompts, ns, strict=True):
        rows = got.get(_key(p), [])
        out.append(rows[:n])
        got[_key(p)] = rows[n:]
    return out
