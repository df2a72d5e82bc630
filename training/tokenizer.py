"""Tokenizers for seed models: byte-level BPE trained on the seed corpus.

With `vocab_size` at 256 + the special tokens there are no merges: a character (byte) level
tokenizer, which small models learn alignment-heavy tasks (grids, digits) with most easily.
Byte-level means any text encodes, including characters the corpus never had.
`words` become whole tokens (a DSL's primitive names, code boilerplate): a small model then
picks `rot90` in one step instead of spelling it, so it cannot misspell it, and programs
get several times shorter to learn and to generate.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
SPECIAL_TOKENS = [PAD, BOS, EOS]
BYTE_ALPHABET = 256
# A plain role-tagged template, so chat-style prompts (messages) work with every engine.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def train_tokenizer(texts: Iterable[str], vocab_size: int = 512, words: Sequence[str] = ()) -> PreTrainedTokenizerFast:
    minimum = BYTE_ALPHABET + len(SPECIAL_TOKENS)
    if vocab_size < minimum:
        raise ValueError(f"vocab_size={vocab_size} is too small: byte-level BPE needs at least {minimum}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    if words:
        if any(not w for w in words):
            raise ValueError("words must be non-empty strings")
        # matched in raw text before BPE (longest first), decoded verbatim
        tok.add_tokens([AddedToken(w, normalized=False) for w in dict.fromkeys(words)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD, clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast
