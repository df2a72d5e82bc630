"""Prompt/completion rows tokenized as the engine sees them: the prompt alone, then the completion.

    data = tokenized_apart(dataset, tokenizer)   # input_ids + completion_mask, which TRL trains on as given

TRL's SFTTrainer tokenizes prompt + completion as one text and starts the completion where the two
tokenizations diverge. Where a token merges across the boundary, the model is trained on a context
it never sees when sampling: SmolLM2's chat prompt ends in '<|im_start|>assistant\\n' and a compact
program body starts with '    grid = ...'; together they tokenize as one '\\n   ' token, so the
prompt's last token is dropped and the completion starts with a token the engine never lets the
model emit after the prompt it sends (the engine tokenizes the prompt alone, ending in '\\n').
Here the prompt is rendered and tokenized alone, exactly as the engine renders it
(common.sampling.render_prompt), and the completion's text after it is tokenized alone.
"""

from __future__ import annotations

import logging
from typing import Any

from datasets import Dataset

from common.sampling import render_prompt

log = logging.getLogger(__name__)


def split_ids(row: dict[str, Any], tokenizer: Any) -> dict[str, list[int]]:
    """One row's input_ids and completion_mask (1 on the completion's tokens)."""
    prompt, completion = row["prompt"], row["completion"]
    prompt_text = render_prompt(tokenizer, prompt)
    if isinstance(prompt, list):  # conversational: the completion is what the template adds after the prompt
        full = tokenizer.apply_chat_template(prompt + completion, tokenize=False)
        if not full.startswith(prompt_text):
            # a template that renders a turn differently once answered (e.g. one that strips thoughts):
            # no boundary to cut at, so as TRL does: the completion starts where the tokenizations diverge
            prompt_ids, ids = tokenizer(prompt_text)["input_ids"], tokenizer(full)["input_ids"]
            start = next((i for i, (a, b) in enumerate(zip(prompt_ids, ids, strict=False)) if a != b),
                         min(len(prompt_ids), len(ids)))
            return {"input_ids": ids, "completion_mask": [0] * start + [1] * (len(ids) - start)}
        completion_text = full[len(prompt_text):]
    else:  # plain text: the completion ends with EOS, as TRL adds it
        eos = tokenizer.eos_token or ""
        completion_text = completion if completion.endswith(eos) else completion + eos
    prompt_ids = tokenizer(prompt_text)["input_ids"]
    completion_ids = tokenizer(completion_text, add_special_tokens=False)["input_ids"]
    return {"input_ids": prompt_ids + completion_ids, "completion_mask": [0] * len(prompt_ids) + [1] * len(completion_ids)}


def tokenized_apart(dataset: Dataset, tokenizer: Any) -> Dataset:
    """`dataset` (TRL prompt/completion, text or conversational) as input_ids + completion_mask."""
    return dataset.map(split_ids, fn_kwargs={"tokenizer": tokenizer}, remove_columns=dataset.column_names)
