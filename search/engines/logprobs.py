"""Per-token log-probabilities from transformers' `generate`, in OpenAI chat's shape.

Computed from the raw logits (`output_logits`), before temperature, top-k/p or a regex mask,
as vLLM's default `logprobs_mode="raw_logprobs"` does: the model's own probabilities of the
tokens it sampled. One step at a time, so a long batch never holds a (batch, steps, vocab)
tensor of log-probabilities.
"""

from __future__ import annotations

from typing import Any

import torch

from common.sampling import SamplingParams


def generate_kwargs(params: SamplingParams) -> dict[str, Any]:
    """Extra `generate` arguments: the logits only when logprobs were asked for (they cost memory)."""
    if params.logprobs is None:
        return {}
    return {"output_logits": True, "return_dict_in_generate": True}


def split_output(out: Any, prompt_width: int, params: SamplingParams, tokenizer: Any
                 ) -> tuple[list[list[int]], list[list[dict[str, Any]]] | None]:
    """(new token ids per row, logprob entries per row or None) from generate's output."""
    if params.logprobs is None:
        return out[:, prompt_width:].tolist(), None
    new = out.sequences[:, prompt_width:]
    return new.tolist(), token_logprobs(out.logits, new, params.logprobs, tokenizer)


def token_logprobs(logits: tuple[torch.Tensor, ...], tokens: torch.Tensor, k: int, tokenizer: Any
                   ) -> list[list[dict[str, Any]]]:
    """One entry per generated token and row: the sampled token's logprob and the k most likely."""
    names: dict[int, str] = {}

    def entry(token_id: int, logprob: float) -> dict[str, Any]:
        if token_id not in names:
            names[token_id] = tokenizer.decode([token_id])
        text = names[token_id]
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

    rows: list[list[dict[str, Any]]] = [[] for _ in range(tokens.shape[0])]
    for step, step_logits in enumerate(logits[: tokens.shape[1]]):
        logp = step_logits.float().log_softmax(-1)
        chosen = logp.gather(1, tokens[:, step : step + 1].to(logp.device)).squeeze(1).tolist()
        top_values, top_ids = logp.topk(k, dim=-1) if k else (None, None)
        for r, row in enumerate(rows):
            top = [] if top_ids is None else [
                entry(i, v) for i, v in zip(top_ids[r].tolist(), top_values[r].tolist(), strict=True)]
            row.append(entry(int(tokens[r, step]), chosen[r]) | {"top_logprobs": top})
    return rows
