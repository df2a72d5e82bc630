"""The regex constraint's automaton gives the masks the vocabulary scan gives, and the same samples.

The scan (TokenRegex(automaton=False): every token tried with `regex`'s partial matching) is
the reference; the automaton (search/engines/regex_automaton.py) must agree with it on every
completion text, on the demo seed model's program tokens and on a character-level tokenizer.
"""

from __future__ import annotations

import random
import zlib

import pytest
import regex
from transformers import AutoTokenizer

from common.sampling import SamplingParams
from evolution.programs import body_regex
from search.engines.hf import TransformersEngine
from search.engines.regex_automaton import RegexAutomaton, Unsupported
from search.engines.regex_constraint import RegexLogitsProcessor, TokenPieces, TokenRegex

DEMO = "models/soar-demo-seed"  # shipped: its tokens are whole DSL program lines
PATTERNS = [
    body_regex(colours=[0, 3, 8]),
    body_regex(max_steps=2),
    "( [0-4]){2,3}",
    "( [5-9]){1,3}",
    r"\d+(, \d+)*\)?",
    r"[^a-f\n]{0,4}(x|yy|)z*",
    r"(?:ab|a)+?c.",
    r"[\w ]{1,3}[\s]?[^\W\d]",
    r"a{2}b{1,}c{0,2}",
]
UNSUPPORTED = [r"^a", r"a$", r"a(?=b)", r"(?<!a)b", r"(a)\1", r"(?i)a", r"\ba", r"a*+", r"(?>ab)", r"(ab){1,150000}",
               # syntax the `regex` module reads one way and `re`'s parser another (built wrong before)
               r"[[:digit:]]", r"[x[:^alpha:]]", r"(?:ab){e<=1}", r"x{i<=1}", r"[a[b]"]


@pytest.fixture(scope="module")
def demo_tokenizer():
    return AutoTokenizer.from_pretrained(DEMO)


def texts(pattern: str, pieces: dict[int, str], rng: random.Random, count: int = 60) -> list[str]:
    """Completion texts as sampling meets them: prefixes of matches the scan allows, random
    token strings (mostly dead ends), and the empty text."""
    scan = regex.compile(pattern)
    out, values = [""], list(pieces.values())
    for _ in range(count):
        text = ""
        for _ in range(rng.randint(1, 6)):
            ok = [p for p in values if scan.fullmatch(text + p, partial=True)]
            if not ok or rng.random() < 0.15:
                text += rng.choice(values)  # off the pattern
                break
            text += rng.choice(ok)
        out.append(text)
    return out


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("vocab", ["demo", "chars"])
def test_automaton_allows_what_the_scan_allows(pattern, vocab, demo_tokenizer):
    pieces = TokenPieces(demo_tokenizer)
    if vocab == "chars":  # one token per character: the automaton's steps are the tokens
        pieces.pieces = {i: t for i, t in pieces.pieces.items() if len(t) == 1}
        pieces.trie = type(pieces.trie)(pieces.pieces)
    fast = TokenRegex(pattern, demo_tokenizer, pieces)
    slow = TokenRegex(pattern, demo_tokenizer, pieces, automaton=False)
    assert fast.automaton is not None and slow.automaton is None
    rng = random.Random(zlib.crc32(f"{pattern}|{vocab}".encode()))  # stable: str hashes are salted per process
    checked = texts(pattern, pieces.pieces, rng)
    for text in checked:
        assert sorted(fast.allowed(text).tolist()) == sorted(slow.allowed(text).tolist()), (pattern, text)
    assert len({fast.key(t) for t in checked}) <= len(set(checked))  # texts share states


@pytest.mark.parametrize("pattern", UNSUPPORTED)
def test_patterns_the_automaton_does_not_model_fall_back_to_the_scan(pattern, demo_tokenizer):
    with pytest.raises(Unsupported):
        RegexAutomaton(pattern)
    constraint = TokenRegex(pattern, demo_tokenizer)
    assert constraint.automaton is None and constraint.allowed("").numel() > 0


def test_regex_module_syntax_is_refused_not_misread():
    """`re` reads [[:digit:]] as a set of '[', ':', 'd', ... then ']': an automaton built from
    that would forbid '1', which `regex` matches."""
    assert regex.fullmatch(r"[[:digit:]]", "1") is not None
    with pytest.raises(Unsupported, match="POSIX class"):
        RegexAutomaton(r"[[:digit:]]")
    for fine in (r"a{2,3}", r"a{3}", r"[\[a]b", r"x\[y\]"):  # counted repeats and escaped brackets still build
        RegexAutomaton(fine)


def test_masks_are_kept_per_state_not_per_text(demo_tokenizer):
    import torch

    constraint = TokenRegex(body_regex(colours=[1, 2]), demo_tokenizer)
    scores = torch.zeros(320)
    one = "    grid = rot90(grid)\n"
    two = "    grid = flip_h(grid)\n"
    assert constraint.key(one) == constraint.key(two)  # one line written, either line: the same state
    assert constraint.mask(one, scores) is constraint.mask(two, scores)
    assert constraint.mask(one, scores)[310:].eq(float("-inf")).all()  # ids past the tokenizer: never


@pytest.mark.parametrize("params", [
    SamplingParams(n=1, temperature=0, max_tokens=24),
    SamplingParams(n=8, temperature=1.0, min_p=0.05, max_tokens=24, seed=3),
], ids=["greedy", "seeded"])
def test_constrained_samples_equal_with_the_automaton_and_the_scan(params):
    """The demo model under the demo's grammar: token for token the same completions."""
    from dataclasses import replace

    pattern = body_regex(colours=[0, 2, 5])
    params = replace(params, regex=pattern)
    prompts = ["in 0 2\n2 0\nout 2 0\n0 2\ndef transform(grid):\n", "in 5 5\n0 5\nout 5 0\n5 5\ndef transform(grid):\n"]
    engines = [TransformersEngine(DEMO, num_threads=1, regex_automaton=on) for on in (True, False)]
    fast, slow = (e.generate(prompts, params) for e in engines)
    assert engines[0]._constraints[pattern].automaton is not None and engines[1]._constraints[pattern].automaton is None
    assert [[c.text for c in row] for row in fast] == [[c.text for c in row] for row in slow]
    assert [[c.completion_tokens for c in row] for row in fast] == [[c.completion_tokens for c in row] for row in slow]
    assert all(regex.fullmatch(pattern, c.text) for row in fast for c in row if c.finish_reason == "stop")


def test_the_processor_steps_each_row_by_its_new_token_and_masks_as_the_text_does(demo_tokenizer):
    """The processor used to decode and walk each row's whole completion at every step (quadratic
    in its length); it now advances each row by the token it took, with the same masks."""
    import torch

    constraint = TokenRegex(body_regex(colours=[1, 2]), demo_tokenizer)
    decodes = 0

    class Counting:
        def decode(self, ids, **kw):
            nonlocal decodes
            decodes += 1
            return demo_tokenizer.decode(ids, **kw)

    proc = RegexLogitsProcessor(constraint, Counting(), prompt_width=2)
    rng = random.Random(0)
    ids = torch.tensor([[5, 6]] * 4)
    width = len(demo_tokenizer)
    for step in range(40):
        out = proc(ids, torch.zeros(len(ids), width))
        texts = [demo_tokenizer.decode(row, skip_special_tokens=True) for row in ids[:, 2:].tolist()]
        for r, text in enumerate(texts):
            if constraint.eos in ids[r, 2:].tolist():
                assert out[r].eq(0).all()
                continue
            assert torch.equal(out[r], constraint.mask(text, out[r])), (step, r)
        allowed = [torch.nonzero(row == 0).flatten().tolist() for row in out]
        ids = torch.cat([ids, torch.tensor([[rng.choice(a)] for a in allowed])], dim=1)
    assert decodes == 4  # each row's (empty) text once, at the first step
