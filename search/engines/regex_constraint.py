"""Regex-constrained sampling for the transformers engine (vLLM does it with xgrammar).

At every step a row may only take tokens that keep its completion a prefix of some match
of the pattern (the `regex` package's partial matching), and may only end (EOS) on a full
match. Allowed sets are cached by completion text, so a batch of samples that share
prefixes (most do: programs start alike) pays for each prefix once. Meant for small
vocabularies and short completions, such as the seed models' DSL programs; a 100k-token
vocabulary would want a compiled token automaton instead.
"""

from __future__ import annotations

from functools import lru_cache

import regex
import torch


@lru_cache(maxsize=32)
def _compile(pattern: str) -> regex.Pattern:
    return regex.compile(pattern)


class TokenRegex:
    """Which tokens may follow a completion so that it still can match `pattern`."""

    def __init__(self, pattern: str, tokenizer):
        self.pattern = _compile(pattern)
        self.eos = tokenizer.eos_token_id
        special = set(tokenizer.all_special_ids)
        self.pieces = {i: tokenizer.decode([i]) for i in range(len(tokenizer)) if i not in special}
        self.pieces = {i: t for i, t in self.pieces.items() if t and "\ufffd" not in t}
        self._allowed: dict[str, torch.Tensor] = {}

    def allowed(self, text: str) -> torch.Tensor:
        ids = self._allowed.get(text)
        if ids is None:
            ok = [i for i, piece in self.pieces.items() if self.pattern.fullmatch(text + piece, partial=True)]
            if self.pattern.fullmatch(text):
                ok.append(self.eos)
            if not ok:  # a dead end cannot happen from a valid prefix; end rather than loop
                ok = [self.eos]
            ids = self._allowed[text] = torch.tensor(ok, dtype=torch.long)
        return ids


class RegexLogitsProcessor:
    """A transformers LogitsProcessor: masks every token that would break the pattern."""

    def __init__(self, constraint: TokenRegex, tokenizer, prompt_width: int):
        self.constraint, self.tokenizer, self.prompt_width = constraint, tokenizer, prompt_width

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        mask = torch.full_like(scores, float("-inf"))
        for row, ids in enumerate(input_ids[:, self.prompt_width:].tolist()):
            if self.constraint.eos in ids:  # finished rows only produce padding anyway
                mask[row] = 0.0
                continue
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            mask[row, self.constraint.allowed(text).to(scores.device)] = 0.0
        return scores + mask
