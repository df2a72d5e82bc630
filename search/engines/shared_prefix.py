"""Decoding over a prompt prefix that every row of a batch shares, held once (cascade attention).

The n samples of a SOAR prompt, and the refinement prompts of one task, all attend over the
same long prefix (the task's grids). A plain KV cache holds a copy of it per row, and every
decoding step copies and reads batch x prefix keys and values: most of a step's time for a
small model and a long prompt. Here the prefix is kept once, shape (1, heads, P, dim), and
each row keeps only its own columns after it. Attention runs in two parts and merges them by
log-sum-exp, as FlashInfer's cascade inference does: every query of every row against the
prefix in one call (queries of all rows stacked, the prefix read once), then each row's
queries against its own columns (with the usual padding/causal mask); softmax over the union
of both key sets equals the merge of the two partial softmaxes weighted by their sums.

The model is loaded with `attn_implementation=ATTENTION` (registered with transformers'
AttentionInterface); a forward pass whose cache is not a SharedPrefixCache (plain prefill,
training) goes to the stock sdpa function unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import AttentionInterface
from transformers.cache_utils import Cache, DynamicLayer
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

ATTENTION = "ratchet_shared_prefix"
_PREFIX = "ratchet_shared_prefix"  # attribute of a layer's returned keys: the (keys, values) of the prefix


class SharedPrefixLayer(DynamicLayer):
    """One layer's cache: a prefix shared by all rows, then each row's own columns.
    Lengths and mask sizes count both, so generate's positions and masks see the whole row."""

    def __init__(self, prefix_keys: torch.Tensor, prefix_values: torch.Tensor, rows: int):
        super().__init__()
        self.prefix_keys, self.prefix_values = prefix_keys, prefix_values
        shape = (rows, prefix_keys.shape[1], 0, prefix_keys.shape[3])
        self.device, self.is_initialized = prefix_keys.device, True
        self.keys = prefix_keys.new_zeros(shape)
        self.values = prefix_values.new_zeros(shape)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys = torch.cat([self.keys, key_states], dim=-2)
        self.values = torch.cat([self.values, value_states], dim=-2)
        keys = self.keys.view_as(self.keys)  # a fresh view carries the prefix to the attention function
        setattr(keys, _PREFIX, (self.prefix_keys, self.prefix_values))
        return keys, self.values

    @property
    def prefix_length(self) -> int:
        return self.prefix_keys.shape[-2]

    def get_seq_length(self, *args, **kwargs) -> int:
        return self.prefix_length + self.keys.shape[-2]

    def get_mask_sizes(self, query, *args, **kwargs) -> tuple[int, int]:
        query_length = query if isinstance(query, int) else query.shape[0]  # older versions pass cache_position
        return self.get_seq_length() + query_length, 0

    def batch_repeat_interleave(self, repeats: int) -> None:
        self.keys, self.values = self.keys.repeat_interleave(repeats, 0), self.values.repeat_interleave(repeats, 0)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.keys, self.values = self.keys[indices, ...], self.values[indices, ...]


class SharedPrefixCache(Cache):
    """A Cache of SharedPrefixLayers: `prefix[layer] = (keys, values)`, each (1, heads, P, dim)."""

    def __init__(self, prefix: Sequence[tuple[torch.Tensor, torch.Tensor]], rows: int):
        if not prefix or prefix[0][0].shape[0] != 1 or prefix[0][0].shape[2] < 1:
            raise ValueError("a shared prefix needs one row of at least one token per layer")
        super().__init__(layers=[SharedPrefixLayer(k, v, rows) for k, v in prefix])


def _attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
            scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(softmax(q k^T * scale + mask) v, log-sum-exp of the scores per query); mask additive.
    On CPU PyTorch's flash kernel, which returns the log-sum-exp it computed; elsewhere the
    plain formula (transformers' eager attention, plus the log-sum-exp)."""
    if query.device.type == "cpu":
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, 0.0, False, attn_mask=mask, scale=scale)
        return out, lse.to(torch.float32)
    return attend_math(query, key, value, mask, scale)


def attend_math(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
                scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    scores = torch.matmul(query.float(), key.float().transpose(-1, -2)) * scale
    if mask is not None:
        scores = scores + mask
    lse = torch.logsumexp(scores, dim=-1)
    return torch.matmul(torch.softmax(scores, dim=-1), value.float()).to(query.dtype), lse


def cascade_attention(query: torch.Tensor, rows_key: torch.Tensor, rows_value: torch.Tensor,
                      prefix_key: torch.Tensor, prefix_value: torch.Tensor, rows_mask: torch.Tensor | None,
                      scale: float) -> torch.Tensor:
    """Attention of `query` (batch, q_heads, S, dim) over [prefix | row columns]; rows_mask: a
    boolean (batch, 1, S, R) mask of the row columns (True: attend), None when all are visible
    (one query) or causal. Returns (batch, q_heads, S, dim)."""
    batch, q_heads, length, dim = query.shape
    kv_heads = prefix_key.shape[1]
    groups = q_heads // kv_heads
    # every query of every row against the one prefix: rows (and GQA groups) stacked as queries
    stacked = query.view(batch, kv_heads, groups, length, dim).permute(1, 0, 2, 3, 4).reshape(1, kv_heads, -1, dim)
    out_p, lse_p = _attend(stacked, prefix_key, prefix_value, None, scale)
    out_p = out_p.reshape(kv_heads, batch, groups, length, dim).permute(1, 0, 2, 3, 4).reshape(query.shape)
    lse_p = lse_p.reshape(kv_heads, batch, groups, length).permute(1, 0, 2, 3).reshape(batch, q_heads, length)
    if rows_key.shape[2] == 0:
        return out_p
    columns = rows_key.shape[2]
    if rows_mask is None and length > 1:  # causal, aligned to the last column (queries are the newest tokens)
        rows_mask = torch.ones(length, columns, dtype=torch.bool, device=query.device).tril(columns - length)
        rows_mask = rows_mask.expand(batch, 1, length, columns)
    additive = None
    if rows_mask is not None:
        additive = torch.zeros(rows_mask.shape, dtype=query.dtype, device=query.device)
        additive = additive.masked_fill(~rows_mask, float("-inf"))
    out_r, lse_r = _attend(query, repeat_kv(rows_key, groups), repeat_kv(rows_value, groups), additive, scale)
    if rows_mask is not None:  # a query that sees none of its row's columns (padding) takes the prefix alone
        lse_r = lse_r.masked_fill(~rows_mask.any(-1), float("-inf"))
        out_r = torch.nan_to_num(out_r)
    top = torch.maximum(lse_p, lse_r)
    w_p, w_r = torch.exp(lse_p - top), torch.exp(lse_r - top)
    merged = (out_p.float() * w_p[..., None] + out_r.float() * w_r[..., None]) / (w_p + w_r)[..., None]
    return merged.to(query.dtype)


def shared_prefix_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attention_mask: torch.Tensor | None, dropout: float = 0.0,
                            scaling: float | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: sdpa, unless the keys come from a SharedPrefixLayer."""
    prefix = getattr(key, _PREFIX, None)
    if prefix is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    prefix_key, prefix_value = prefix
    mask = None
    if attention_mask is not None:
        if attention_mask.dtype != torch.bool:
            raise TypeError(f"{ATTENTION} expects sdpa's boolean masks, got {attention_mask.dtype}")
        mask = attention_mask[..., prefix_key.shape[2]:]  # prefix columns are never padding
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    out = cascade_attention(query, key, value, prefix_key, prefix_value, mask, scale)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION, shared_prefix_attention)
AttentionMaskInterface.register(ATTENTION, sdpa_mask)
