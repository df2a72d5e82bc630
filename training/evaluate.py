"""Quick checks of what a checkpoint learned: greedy accuracy and completion log-probabilities.

Used by tests, demos and benchmarks on small models; search/ has the real sampler engines.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from common.progress import progress


def _load(path: str):
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa").eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    return model, tokenizer


@torch.inference_mode()
def greedy_accuracy(path: str, rows: Sequence[dict[str, str]], max_new_tokens: int = 16, batch_size: int = 64,
                    desc: str = "") -> float:
    """Fraction of rows whose greedy completion equals the row's completion exactly (`desc`:
    show progress under that name)."""
    model, tokenizer = _load(path)
    correct = 0
    bar = progress(total=len(rows), desc=desc, unit="row", disable=not desc)
    for i in range(0, len(rows), batch_size):
        batch = rows[i : i + batch_size]
        enc = tokenizer([r["prompt"] for r in batch], return_tensors="pt", padding=True)
        out = model.generate(
            **enc, max_new_tokens=max_new_tokens, do_sample=False,
            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        )
        texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        correct += sum(t == r["completion"] for t, r in zip(texts, batch, strict=True))
        bar.update(len(batch))
    bar.close()
    return correct / len(rows)


@torch.inference_mode()
def completion_logprobs(path: str, prompts: Sequence[str], completions: Sequence[str]) -> list[float]:
    """Sum of log-probabilities of each completion given its prompt (for preference margins)."""
    model, tokenizer = _load(path)
    scores = []
    for prompt, completion in zip(prompts, completions, strict=True):
        p_ids = tokenizer(prompt)["input_ids"]
        full = tokenizer(prompt + completion, return_tensors="pt")["input_ids"]
        logits = model(full).logits[0, :-1].float()
        targets = full[0, 1:]
        logp = torch.log_softmax(logits, -1).gather(-1, targets[:, None])[:, 0]
        scores.append(float(logp[len(p_ids) - 1 :].sum()))
    return scores
