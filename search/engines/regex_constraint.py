"""Regex-constrained sampling for the transformers engine (vLLM does it with xgrammar).

At every step a row may only take tokens that keep its completion a prefix of some match
of the pattern (the `regex` package's partial matching), and may only end (EOS) on a full
match. The pattern is compiled into a lazily built automaton (search/engines/regex_automaton.py,
as outlines and xgrammar do): a completion text is mapped to its automaton state, and each
state's allowed-token mask is computed once, by walking the vocabulary's trie, and kept for
the constraint's life (the engine keeps one per pattern, across batches and requests).
Patterns the automaton does not model (anchors, lookaround, backreferences, flags) fall back
to scanning every token with `regex`'s partial matching, cached by completion text; both give
the same masks (tests/test_regex_automaton.py).
"""

from __future__ import annotations

from functools import lru_cache

import regex
import torch

from search.engines.regex_automaton import DEAD, PieceTrie, RegexAutomaton, Unsupported


@lru_cache(maxsize=32)
def _compile(pattern: str) -> regex.Pattern:
    return regex.compile(pattern)


class TokenPieces:
    """A tokenizer's token texts (special and undecodable tokens left out) and their trie:
    the same for every pattern, so built once per tokenizer."""

    def __init__(self, tokenizer):
        self.eos = tokenizer.eos_token_id
        special = set(tokenizer.all_special_ids)
        pieces = {i: tokenizer.decode([i]) for i in range(len(tokenizer)) if i not in special}
        self.pieces = {i: t for i, t in pieces.items() if t and "\ufffd" not in t}
        self.trie = PieceTrie(self.pieces)


class TokenRegex:
    """Which tokens may follow a completion so that it still can match `pattern`.
    `automaton=False` always scans (the reference the automaton is checked against)."""

    def __init__(self, pattern: str, tokenizer, pieces: TokenPieces | None = None, automaton: bool = True):
        self.vocab = pieces or TokenPieces(tokenizer)
        self.eos, self.pieces = self.vocab.eos, self.vocab.pieces
        self.automaton: RegexAutomaton | None = None
        if automaton:
            try:
                self.automaton = RegexAutomaton(pattern)
            except Unsupported:
                pass
        self.pattern = _compile(pattern) if self.automaton is None else None
        self._state: dict[str, int] = {}  # completion text -> automaton state
        self._allowed: dict[str | int, torch.Tensor] = {}  # state (or, scanning, text) -> token ids
        self._masks: dict[tuple, torch.Tensor] = {}  # (key, width, device, dtype) -> additive mask

    def key(self, text: str) -> str | int:
        """What the allowed set depends on: the automaton state of `text` (or `text` itself when scanning)."""
        if self.automaton is None:
            return text
        state = self._state.get(text)
        if state is None:
            if len(self._state) > 100_000:  # texts are many, states few: bound the text index
                self._state.clear()
            state = self._state[text] = self.automaton.walk(self.automaton.initial, text)
        return state

    def allowed(self, text: str) -> torch.Tensor:
        return self._allowed_for(self.key(text))

    def _allowed_for(self, key: str | int) -> torch.Tensor:
        ids = self._allowed.get(key)
        if ids is None:
            if self.automaton is not None:
                ok = self.vocab.trie.allowed(self.automaton, key) if key != DEAD else []
                if self.automaton.accepts(key):
                    ok.append(self.eos)
            else:
                ok = [i for i, piece in self.pieces.items() if self.pattern.fullmatch(key + piece, partial=True)]
                if self.pattern.fullmatch(key):
                    ok.append(self.eos)
            if not ok:  # a dead end cannot happen from a valid prefix; end rather than loop
                ok = [self.eos]
            ids = self._allowed[key] = torch.tensor(ok, dtype=torch.long)
        return ids

    def mask(self, text: str, like: torch.Tensor) -> torch.Tensor:
        """A row shaped, typed and placed as `like`'s last dimension: 0 for allowed tokens,
        -inf for the rest; kept per state."""
        return self.mask_for(self.key(text), like)

    def mask_for(self, key: str | int, like: torch.Tensor) -> torch.Tensor:
        """`mask` for a key already known (an automaton state, or the text when scanning)."""
        slot = (key, like.shape[-1], str(like.device), like.dtype)
        found = self._masks.get(slot)
        if found is None:
            if len(self._masks) > (10_000 if self.automaton is None else 4_096):  # scanning: one per text
                self._masks.clear()
            found = torch.full(like.shape[-1:], float("-inf"), dtype=like.dtype, device=like.device)
            found[self._allowed_for(key).to(like.device)] = 0.0
            self._masks[slot] = found
        return found


class RegexLogitsProcessor:
    """A transformers LogitsProcessor: masks every token that would break the pattern.

    One per generate call. With the automaton, each row's state is advanced by the piece of the
    token it took last (the allowed sets are built from the same pieces), so a step costs the
    new token, not a decode and walk of the whole completion so far. Scanning decodes the text."""

    def __init__(self, constraint: TokenRegex, tokenizer, prompt_width: int):
        self.constraint, self.tokenizer, self.prompt_width = constraint, tokenizer, prompt_width
        self._states: list[int] | None = None  # automaton state per row after the tokens seen so far
        self._seen = 0  # generated tokens those states cover

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        generated = input_ids[:, self.prompt_width:]
        if self.constraint.automaton is None:
            return self._by_text(generated, scores)
        self._advance(generated)
        free = torch.zeros_like(scores[0])
        rows = [free if state is None else self.constraint.mask_for(state, scores) for state in self._states]
        return scores + torch.stack(rows)

    def _advance(self, generated: torch.LongTensor) -> None:
        """Move each row's state over its newest token (None: the row has ended). Rows that are not
        the ones seen one step ago (never in one generate call) are mapped from their texts."""
        automaton, eos, pieces = self.constraint.automaton, self.constraint.eos, self.constraint.pieces
        n = generated.shape[1]
        if self._states is None or len(self._states) != len(generated) or n != self._seen + 1:
            self._states = [None if eos in ids else self.constraint.key(self.tokenizer.decode(ids, skip_special_tokens=True))
                            for ids in generated.tolist()]
        else:
            for r, token in enumerate(generated[:, -1].tolist()):
                state = self._states[r]
                self._states[r] = None if state is None or token == eos else automaton.walk(state, pieces.get(token, ""))
        self._seen = n

    def _by_text(self, generated: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        free = torch.zeros_like(scores[0])
        rows = []
        for ids in generated.tolist():
            if self.constraint.eos in ids:
                rows.append(free)
                continue
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            rows.append(self.constraint.mask(text, scores))
        return scores + torch.stack(rows)
