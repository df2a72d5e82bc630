"""A lazily built automaton for a regex: which tokens may follow a state, computed once per state.

Scanning the vocabulary with `regex`'s partial matching for every new completion text costs
one regex call per token per text, and a search meets thousands of distinct texts (each
program line multiplies them). The texts fall into few classes, though: the states of the
pattern's automaton. As outlines and xgrammar do, this compiles the pattern (parsed by
Python's own `re` parser) into an NFA, walks it lazily as a DFA (a state is the set of NFA
states a text can be in, built when first reached), and keeps each state's allowed-token mask
for the life of the constraint, across batches and requests.

The sets keep only NFA states from which a match can still be completed, so a text is a
prefix of some match (what `fullmatch(text, partial=True)` answers) exactly when its set is
not empty, and a full match when the set holds the accepting state. Patterns with features
whose meaning depends on context (anchors, lookaround, backreferences, flags, possessive or
atomic groups) or too large an NFA (bounded repeats are unrolled) are refused with
`Unsupported`; the caller then falls back to the scan.
"""

from __future__ import annotations

import re
from functools import lru_cache
from re import _constants as C  # noqa: N812 (the parser's opcode names)
from re import _parser as P  # noqa: N812

import regex

DEAD = 0  # the empty state set: no match can follow
MAX_NFA_STATES = 200_000  # bounded repeats are unrolled: a{1,100000} scans instead


class Unsupported(ValueError):
    """The pattern uses a construct this automaton does not model."""


@lru_cache(maxsize=8192)  # (category, character): a vocabulary's characters, six categories
def _category(code: object, ch: str) -> bool:
    """A character class escape (\\d, \\w, \\s and their negations), as the `regex` module reads it."""
    escape = {C.CATEGORY_DIGIT: r"\d", C.CATEGORY_NOT_DIGIT: r"\D", C.CATEGORY_SPACE: r"\s",
              C.CATEGORY_NOT_SPACE: r"\S", C.CATEGORY_WORD: r"\w", C.CATEGORY_NOT_WORD: r"\W"}.get(code)
    if escape is None:
        raise Unsupported(f"character category {code}")
    return regex.fullmatch(escape, ch) is not None


def _matcher(op: object, av: object):
    """A predicate for one character position of the pattern."""
    if op is C.LITERAL or op is C.NOT_LITERAL:
        c, equal = chr(av), op is C.LITERAL
        return lambda ch: (ch == c) == equal
    if op is C.ANY:
        return lambda ch: ch != "\n"
    if op is C.IN:
        items = list(av)
        negate = bool(items) and items[0][0] is C.NEGATE
        tests = [_matcher(o, a) if o is not C.CATEGORY else (lambda ch, a=a: _category(a, ch))
                 for o, a in (items[1:] if negate else items)]
        return lambda ch: negate != any(t(ch) for t in tests)
    if op is C.RANGE:
        lo, hi = av
        return lambda ch: lo <= ord(ch) <= hi
    if op is C.CATEGORY:
        return lambda ch: _category(av, ch)
    raise Unsupported(f"{op}")


class _NFA:
    """Thompson NFA: edges[s] = [(predicate, target)], eps[s] = [targets]."""

    def __init__(self):
        self.edges: list[list] = []
        self.eps: list[list[int]] = []

    def new(self) -> int:
        if len(self.edges) >= MAX_NFA_STATES:
            raise Unsupported(f"more than {MAX_NFA_STATES} NFA states")
        self.edges.append([])
        self.eps.append([])
        return len(self.edges) - 1

    def build(self, items, start: int) -> int:
        """Add the sequence `items` (a parsed subpattern) after `start`; returns its end state."""
        for op, av in items:
            start = self.node(op, av, start)
        return start

    def node(self, op, av, start: int) -> int:
        if op in (C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN):
            end = self.new()
            self.edges[start].append((_matcher(op, av), end))
            return end
        if op is C.SUBPATTERN:
            _group, add_flags, del_flags, sub = av
            if add_flags or del_flags:
                raise Unsupported("inline flags")
            return self.build(sub, start)
        if op is C.BRANCH:
            end = self.new()
            for alt in av[1]:
                s = self.new()
                self.eps[start].append(s)
                self.eps[self.build(alt, s)].append(end)
            return end
        if op in (C.MAX_REPEAT, C.MIN_REPEAT):  # laziness changes which match, not which texts match
            lo, hi, sub = av
            for _ in range(lo):
                start = self.build(sub, start)
            if hi == C.MAXREPEAT:
                loop = self.new()
                self.eps[start].append(loop)
                self.eps[self.build(sub, loop)].append(loop)
                return loop
            end = self.new()
            for _ in range(hi - lo):
                self.eps[start].append(end)
                start = self.build(sub, start)
            self.eps[start].append(end)
            return end
        raise Unsupported(f"{op}")  # AT (anchors, \b), ASSERT, GROUPREF, ATOMIC_GROUP, POSSESSIVE_REPEAT, ...


# Syntax the `regex` module gives a meaning that Python's `re` parser reads as plain characters:
# POSIX classes ([[:digit:]]), fuzzy constraints ({e<=1}), sets inside sets. Such a pattern
# would be built into another language, so it is refused (the caller scans instead).
_REGEX_ONLY = (
    (re.compile(r"\[:|:\]"), "a POSIX class ([:name:])"),
    (re.compile(r"\{[^}]*[^\d,}][^}]*\}"), "a brace that is not a counted repeat (fuzzy matching?)"),
    (re.compile(r"(?<!\\)\[(?:\\.|[^\]\\])*(?<!\\)\["), "a '[' inside a character set"),
)


def _read_differently(pattern: str) -> str | None:
    """Why `re` and `regex` may read `pattern` differently, or None (a conservative check)."""
    return next((f"{why}: `regex` and `re` read it differently" for rx, why in _REGEX_ONLY if rx.search(pattern)), None)


class RegexAutomaton:
    """A pattern's lazily built DFA over characters. States are ints; DEAD (0) is the empty set."""

    def __init__(self, pattern: str):
        if reason := _read_differently(pattern):
            raise Unsupported(reason)
        try:
            parsed = P.parse(pattern)
        except re.error as e:
            raise Unsupported(f"re cannot parse it: {e}") from e
        if parsed.state.flags & ~re.UNICODE:
            raise Unsupported("global flags")
        nfa = _NFA()
        first = nfa.new()
        self._accept = nfa.build(parsed, first)
        self._nfa = nfa
        self._live = self._co_reachable()
        self._sets: list[frozenset[int]] = [frozenset()]
        self._ids: dict[frozenset[int], int] = {frozenset(): DEAD}
        self._next: dict[tuple[int, str], int] = {}
        self.initial = self._state([first])

    def _co_reachable(self) -> set[int]:
        """NFA states from which the accepting state can be reached."""
        back: dict[int, list[int]] = {}
        for s, (edges, eps) in enumerate(zip(self._nfa.edges, self._nfa.eps, strict=True)):
            for t in [t for _, t in edges] + eps:
                back.setdefault(t, []).append(s)
        live, todo = {self._accept}, [self._accept]
        while todo:
            for s in back.get(todo.pop(), []):
                if s not in live:
                    live.add(s)
                    todo.append(s)
        return live

    def _state(self, nfa_states) -> int:
        closure, todo = set(), list(nfa_states)
        while todo:
            s = todo.pop()
            if s not in closure:
                closure.add(s)
                todo.extend(self._nfa.eps[s])
        key = frozenset(s for s in closure if s in self._live)
        if key not in self._ids:
            self._ids[key] = len(self._sets)
            self._sets.append(key)
        return self._ids[key]

    def step(self, state: int, ch: str) -> int:
        nxt = self._next.get((state, ch))
        if nxt is None:
            edges = self._nfa.edges
            nxt = self._next[(state, ch)] = DEAD if state == DEAD else self._state(
                [t for s in self._sets[state] for test, t in edges[s] if test(ch)])
        return nxt

    def walk(self, state: int, text: str) -> int:
        for ch in text:
            if state == DEAD:
                break
            state = self.step(state, ch)
        return state

    def accepts(self, state: int) -> bool:
        return self._accept in self._sets[state]


class PieceTrie:
    """The tokenizer's token texts in a character trie: tokens sharing a start are walked once."""

    def __init__(self, pieces: dict[int, str]):
        self.root: dict = {}
        for i, piece in pieces.items():
            node = self.root
            for ch in piece:
                node = node.setdefault(ch, {})
            node.setdefault(None, []).append(i)  # key None: the tokens that end here

    def allowed(self, automaton: RegexAutomaton, state: int) -> list[int]:
        """Token ids whose text leads `state` to a live state."""
        out, todo = [], [(self.root, state)]
        while todo:
            node, s = todo.pop()
            for ch, child in node.items():
                if ch is None:
                    continue
                nxt = automaton.step(s, ch)
                if nxt != DEAD:
                    out.extend(child.get(None, ()))
                    todo.append((child, nxt))
        return sorted(out)
