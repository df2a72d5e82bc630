"""The transformers engine's prefill through the prefix cache (search/engines/prefix_cache.py).

A batch of prompts (each but its last token) becomes one KV cache that `generate` continues:
each row's longest cached block prefix is reused and only the rest is run, all rows in one
forward pass. Row r's columns are [pad][cached blocks][pad][rest]: the pads are masked out
and positions continue each row's cached part, so a row's states are those it would have in
a plain left-padded batch (tests/test_prefix_cache.py checks the outputs are equal). The new
full blocks are stored. A block prefix that every row shares and the cache lacks is run once
first, so a batch of one task's prompts computes the task once. With `shared`, those common
blocks are also held once while decoding (search/engines/shared_prefix.py) and the distinct
rows run their rests against them in one pass (_prefill_shared): a repeated prompt once.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache

from search.engines.prefix_cache import PrefixCache
from search.engines.shared_prefix import SharedPrefixCache


def prefill(model: Any, rows: list[list[int]], pc: PrefixCache, *, cache_arg: str, pad_id: int,
            device: str, shared: bool = False) -> tuple[Cache, torch.Tensor, torch.Tensor]:
    """(cache, token ids of its columns, attention mask of its columns) for `rows`. With
    `shared`, the cached blocks every row shares are held once (a SharedPrefixCache whose
    prefix is those blocks; each row's columns follow them)."""
    computed = _prefill_common(model, rows, pc, cache_arg=cache_arg, pad_id=pad_id, device=device)
    blocks = [pc.match(r) for r in rows]  # blocks[r][i][layer] = (keys, values), each (1, heads, block, dim)
    common = min(_shared_blocks([pc.block_keys(r) for r in rows]), *map(len, blocks)) if shared and len(rows) > 1 else 0
    if common:
        return _prefill_shared(model, rows, pc, _concat(blocks[0][:common]), computed, cache_arg=cache_arg,
                               pad_id=pad_id, device=device)
    cached = [len(b) * pc.block_tokens for b in blocks]
    rest = [r[c:] for r, c in zip(rows, cached, strict=True)]
    width_c, width_s = max(cached), max(len(x) for x in rest)
    cache = DynamicCache(config=model.config)
    if width_c:
        parts = [_concat(b) if b else None for b in blocks]
        ref = next(p for p in parts if p is not None)
        for layer, (ref_keys, _) in enumerate(ref):
            keys = ref_keys.new_zeros((len(rows), ref_keys.shape[1], width_c, ref_keys.shape[3]))  # pads stay zero (masked)
            values = torch.zeros_like(keys)
            for r, part in enumerate(parts):
                if part is not None:
                    keys[r, :, width_c - part[layer][0].shape[2] :] = part[layer][0][0]
                    values[r, :, width_c - part[layer][1].shape[2] :] = part[layer][1][0]
            cache.update(keys, values, layer)
    ids = [[pad_id] * (width_c - c) + r[:c] + [pad_id] * (width_s - len(x)) + x
           for r, c, x in zip(rows, cached, rest, strict=True)]
    mask = [[0] * (width_c - c) + [1] * c + [0] * (width_s - len(x)) + [1] * len(x)
            for c, x in zip(cached, rest, strict=True)]
    ids_t, mask_t = torch.tensor(ids, device=device), torch.tensor(mask, device=device)
    if width_s:
        extra = {}
        if any(c != width_c for c in cached) or any(len(x) != width_s for x in rest):  # pads inside: say where
            positions = [[0] * (width_s - len(x)) + list(range(c, c + len(x))) for c, x in zip(cached, rest, strict=True)]
            extra = dict(attention_mask=mask_t, position_ids=torch.tensor(positions, device=device))
        model(input_ids=ids_t[:, width_c:], **{cache_arg: cache}, use_cache=True, logits_to_keep=1, **extra)
        _store(pc, rows, cached, [width_c + width_s - len(x) - c for c, x in zip(cached, rest, strict=True)],
               layer_states(cache))
        computed += sum(len(x) for x in rest)
    pc.record(sum(len(r) + 1 for r in rows), sum(len(r) for r in rows) - computed)  # +1: the last token, run by generate
    return cache, ids_t, mask_t


def _prefill_shared(model: Any, rows: list[list[int]], pc: PrefixCache, prefix: list[tuple[torch.Tensor, torch.Tensor]],
                    computed: int, *, cache_arg: str, pad_id: int, device: str
                    ) -> tuple[Cache, torch.Tensor, torch.Tensor]:
    """prefill for rows whose first cached blocks agree (`prefix`, per layer (1, heads, P, dim)):
    held once in a SharedPrefixCache. The distinct rows (a prompt repeated in the batch runs
    once) run their remaining tokens in one forward pass against it, their columns laid out as
    [prefix][pad][own cached blocks][pad][rest], as in a left-padded batch; repeats then take
    their copy's columns."""
    head = prefix[0][0].shape[2]
    distinct = list(dict.fromkeys(map(tuple, rows)))
    blocks = [pc.match(list(row)) for row in distinct]
    cached = [max(len(b) * pc.block_tokens, head) for b in blocks]
    new = [len(row) - c for row, c in zip(distinct, cached, strict=True)]
    width_c, width_s = max(cached) - head, max(new)
    own = [_concat(b[head // pc.block_tokens :]) if c > head else None for b, c in zip(blocks, cached, strict=True)]
    cache = SharedPrefixCache(prefix, len(distinct))
    for layer, (ref, _) in enumerate(prefix):
        keys = ref.new_zeros((len(distinct), ref.shape[1], width_c, ref.shape[3]))  # pads stay zero (masked)
        values = torch.zeros_like(keys)
        for r, c in enumerate(cached):
            if own[r] is not None:
                k, v = own[r][layer]
                keys[r, :, width_c - (c - head) :], values[r, :, width_c - (c - head) :] = k[0], v[0]
        cache.update(keys, values, layer)
    ids = [list(row[:head]) + [pad_id] * (width_c + head - c) + list(row[head:c]) + [pad_id] * (width_s - n) + list(row[c:])
           for row, c, n in zip(distinct, cached, new, strict=True)]
    mask = [[1] * head + [0] * (width_c + head - c) + [1] * (c - head) + [0] * (width_s - n) + [1] * n
            for c, n in zip(cached, new, strict=True)]
    ids_t, mask_t = torch.tensor(ids, device=device), torch.tensor(mask, device=device)
    if width_s:
        positions = [[0] * (width_s - n) + list(range(c, c + n)) for c, n in zip(cached, new, strict=True)]
        model(input_ids=ids_t[:, head + width_c :], **{cache_arg: cache}, use_cache=True, attention_mask=mask_t,
              position_ids=torch.tensor(positions, device=device), logits_to_keep=1)
        # row r's position j (j >= its cached c) is own column width_c + width_s - new + (j - c)
        _store(pc, [list(r) for r in distinct], cached,
               [width_c + width_s - n - c for c, n in zip(cached, new, strict=True)], layer_states(cache))
        computed += sum(new)
    pc.record(sum(len(r) + 1 for r in rows), sum(len(r) for r in rows) - computed)  # +1: the last token, run by generate
    if len(distinct) == len(rows):
        return cache, ids_t, mask_t
    index = {row: i for i, row in enumerate(distinct)}
    pick = torch.tensor([index[tuple(r)] for r in rows], device=device)
    expanded = SharedPrefixCache(prefix, len(rows))
    for layer, (k, v) in enumerate(layer_states(cache)):
        expanded.update(k[pick], v[pick], layer)
    return expanded, ids_t[pick], mask_t[pick]


def _concat(blocks: list[Any]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, the (keys, values) of consecutive cached blocks joined along the sequence."""
    return [(torch.cat([blk[layer][0] for blk in blocks], dim=2), torch.cat([blk[layer][1] for blk in blocks], dim=2))
            for layer in range(len(blocks[0]))]


def _shared_blocks(keys: list[list[bytes]]) -> int:
    """How many leading blocks every row has in common (their hash chains agree)."""
    shared = 0
    while all(len(k) > shared for k in keys) and all(k[shared] == keys[0][shared] for k in keys):
        shared += 1
    return shared


def _store(pc: PrefixCache, rows: list[list[int]], cached: list[int], offsets: list[int],
           states: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Insert each row's new full blocks; row r's position j (j >= cached[r]) is column offsets[r] + j."""
    size = pc.block_tokens
    for r, (row, c, at) in enumerate(zip(rows, cached, offsets, strict=True)):
        new = []
        for b in range(c // size, len(row) // size):
            lo, hi = at + b * size, at + (b + 1) * size
            # copies: a view would keep the whole batch's tensor alive
            value = tuple((k[r : r + 1, :, lo:hi].clone(), v[r : r + 1, :, lo:hi].clone()) for k, v in states)
            new.append((value, sum(k.nbytes + v.nbytes for k, v in value)))
        pc.insert(row, c // size, new)


def _prefill_common(model: Any, rows: list[list[int]], pc: PrefixCache, **kw: Any) -> int:
    """Run the full blocks every row shares, if the cache lacks them; returns the tokens run."""
    if len(rows) < 2:
        return 0
    shared = _shared_blocks([pc.block_keys(r) for r in rows])
    common = rows[0][: shared * pc.block_tokens]
    have = len(pc.match(common))
    if have == shared:
        return 0
    counts = (pc.prompt_tokens, pc.reused_tokens)
    prefill(model, [common], pc, **kw)
    pc.prompt_tokens, pc.reused_tokens = counts  # counted with the rows that share it
    return len(common) - have * pc.block_tokens


def layer_states(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(keys, values) per layer of a DynamicCache, in either transformers' layout."""
    if hasattr(cache, "layers"):  # transformers >= 4.56
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache, strict=True))
