"""SFT rows tokenized as the engine sees them: the prompt alone, then the completion, so a token that
would merge across the boundary (a chat prompt's closing newline with a body's indent) never puts
the model in a context it does not meet when sampling."""

from __future__ import annotations

import pytest
from datasets import Dataset

from common.sampling import render_prompt
from training.boundary import split_ids, tokenized_apart
from training.tokenizer import train_tokenizer

BODY = "    grid = rot90(grid)\n    return grid\n"


@pytest.fixture(scope="module")
def tokenizer():
    """A byte-level BPE that learnt '\\n   ' as one token (as SmolLM2's has it), with a chat template."""
    texts = [f"user: task {i}\ndef transform(grid):\n{BODY}" for i in range(200)]
    return train_tokenizer(texts, vocab_size=400)


def rows(chat: bool) -> list[dict]:
    if chat:
        return [{"prompt": [{"role": "user", "content": "task 7\ndef transform(grid):\n"}],
                 "completion": [{"role": "assistant", "content": BODY}]}]
    return [{"prompt": "task 7\ndef transform(grid):\n", "completion": BODY}]


@pytest.mark.parametrize("chat", [True, False])
def test_the_prompt_is_tokenized_as_the_engine_sends_it(tokenizer, chat):
    [row] = rows(chat)
    sent = tokenizer(render_prompt(tokenizer, row["prompt"]))["input_ids"]
    joint = tokenizer(render_prompt(tokenizer, row["prompt"]) + BODY)["input_ids"]
    assert joint[:len(sent)] != sent  # the boundary merges when prompt and body are one text
    [out] = tokenized_apart(Dataset.from_list(rows(chat)), tokenizer)
    assert out["input_ids"][:len(sent)] == sent
    assert out["completion_mask"] == [0] * len(sent) + [1] * (len(out["input_ids"]) - len(sent))
    completion = tokenizer.decode(out["input_ids"][len(sent):])
    assert completion.startswith(BODY)
    assert completion.endswith(tokenizer.eos_token) or chat  # plain text ends in EOS, as TRL adds it


class Wrapped:
    """The module's tokenizer behind a chat template of the test's own (`render(messages, gen)`);
    `bos`: it prepends a BOS id when asked for special tokens, as Llama's tokenizers do."""

    def __init__(self, tokenizer, render, bos: int | None = None):
        self.tok, self.render, self.bos = tokenizer, render, bos
        self.eos_token, self.chat_template = tokenizer.eos_token, "x"

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False, **_):
        return self.render(messages, add_generation_prompt)

    def __call__(self, text, add_special_tokens=True):
        ids = self.tok(text, add_special_tokens=False)["input_ids"]
        return {"input_ids": ([self.bos] if add_special_tokens and self.bos is not None else []) + ids}


def test_a_template_that_renders_an_answered_turn_differently_falls_back_to_the_divergence(tokenizer):
    """The prompt as sent ends in a marker the answered conversation lacks: no boundary to cut at, so
    the loss starts where the two tokenizations part (TRL's rule), after the shared user text."""
    def render(messages, gen):
        text = "".join(m["content"] for m in messages)
        return text + ("<gen>" if gen else "")

    wrapped = Wrapped(tokenizer, render)
    [row] = rows(True)
    shared = tokenizer(row["prompt"][0]["content"])["input_ids"]
    out = split_ids(row, wrapped)
    assert out["input_ids"] == tokenizer(render(row["prompt"] + row["completion"], False))["input_ids"]
    start = next(i for i, (a, b) in enumerate(zip(tokenizer(render(row["prompt"], True))["input_ids"],
                                                  out["input_ids"], strict=False)) if a != b)
    assert 0 < start <= len(shared)
    assert out["completion_mask"] == [0] * start + [1] * (len(out["input_ids"]) - start)


def test_special_tokens_are_the_prompts_alone(tokenizer):
    """A tokenizer that adds a BOS adds it once, before the prompt, never inside the row."""
    wrapped = Wrapped(tokenizer, lambda messages, gen: "".join(m["content"] for m in messages), bos=0)
    out = split_ids(rows(False)[0], wrapped)
    assert out["input_ids"][0] == 0 and out["input_ids"].count(0) == 1


def test_sft_trains_on_the_prompt_the_engine_sends(tokenizer, tmp_path):
    """Through train_sft: the rows the trainer sees start with the engine's prompt ids, and the loss
    starts right after them (TRL's own tokenization dropped the prompt's last newline here)."""
    from transformers import TrainerCallback

    from training.seed import SeedConfig, init_model
    from training.sft import SFTJobConfig, train_sft

    model = tmp_path / "model"
    init_model(SeedConfig(preset="tiny"), tokenizer, model)
    seen = []

    class Peek(TrainerCallback):
        def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
            seen.append(next(iter(train_dataloader)))

    [row] = rows(True)
    sent = tokenizer(render_prompt(tokenizer, row["prompt"]))["input_ids"]
    cfg = SFTJobConfig(model_path=str(model), output_dir=str(tmp_path / "out"), max_steps=1,
                       per_device_train_batch_size=1, max_length=256, save_steps=100, disable_tqdm=True, quiet=True)
    train_sft(cfg, rows(True) * 2, callbacks=[Peek()])
    ids, labels = seen[0]["input_ids"][0].tolist(), seen[0]["labels"][0].tolist()
    assert ids[:len(sent)] == sent
    assert labels[:len(sent)] == [-100] * len(sent) and labels[len(sent)] == ids[len(sent)]
