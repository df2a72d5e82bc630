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


def test_a_template_that_renders_an_answered_turn_differently_falls_back_to_the_divergence(tokenizer):
    class Rewriting:
        """A tokenizer whose template adds a marker to the prompt once a turn is answered."""

        eos_token = tokenizer.eos_token
        chat_template = "x"

        def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False, **_):
            text = "".join(m["content"] for m in messages)
            return text if add_generation_prompt or len(messages) == 1 else "#" + text

        def __call__(self, text, add_special_tokens=True):
            return tokenizer(text, add_special_tokens=add_special_tokens)

    out = split_ids(rows(True)[0], Rewriting())
    assert out["completion_mask"][0] == 1 and sum(out["completion_mask"]) == len(out["input_ids"])  # diverges at once


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
