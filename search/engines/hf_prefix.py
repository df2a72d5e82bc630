"""The transformers engine's prefill through the prefix cache (search/engines/prefix_cache.py).

A batch of prompts (each but its last token) becomes one KV cache that `generate` continues:
each row's longest cached block prefix is reused and only the rest is run, all rows in one
forward pass. Row r's columns are [pad][cached blocks][pad][rest]: the pads are masked out
and positions continue each row's cached part, so a row's states are those it would have in
a plain left-padded batch (tests/test_prefix_cache.py checks the outputs are equal). The new
full blocks are stored. A block prefix that every row shares and the cache lacks is run once
first, so a batch of one task's prompts computes the task once. With `shared`, those common
blocks are also held once while decoding (search/engines/shared_prefix.py) and each distinct
row runs its rest alone against them (_prefill_shared): no padding, a repeated prompt once.
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
        model(input_ids=ids_t[:, width_c:], **{cache_arg: cache}, use_cache=True, **extra)
        _store(pc, rows, cached, [width_c + width_s - len(x) - c for c, x in zip(cached, rest, strict=True)],
               layer_states(cache))
        computed += sum(len(x) for x in rest)
    pc.record(sum(len(r) + 1 for r in rows), sum(len(r) for r in rows) - computed)  # +1: the last token, run by generate
    return cache, ids_t, mask_t


def _prefill_shared(model: Any, rows: list[list[int]], pc: PrefixCache, prefix: list[tuple[torch.Tensor, torch.Tensor]],
                    computed: int, *, cache_arg: str, pad_id: int, device: str
                    ) -> tuple[Cache, torch.Tensor, torch.Tensor]:
    """prefill for rows whose first cached blocks agree (`prefix`, per layer (1, heads, P, dim)):
    held once in a SharedPrefixCache. Each distinct row runs its remaining tokens alone against
    it (no padding; a prompt repeated in the batch runs once; a row also reuses the blocks an
    earlier row of the batch just stored), then the rows' columns are laid out as
    [prefix][pad][own cached blocks][pad][rest], as in a left-padded batch."""
    head = prefix[0][0].shape[2]
    done: dict[tuple[int, ...], tuple[int, list[tuple[torch.Tensor, torch.Tensor]]]] = {}  # row -> (cached, states)
    for row in rows:
        if tuple(row) in done:
            continue
        blocks = pc.match(row)
        c = max(len(blocks) * pc.block_tokens, head)
        one = SharedPrefixCache(prefix, 1)
        if c > head:
            for layer, (k, v) in enumerate(_concat(blocks[head // pc.block_tokens :])):
                one.update(k, v, layer)
        if len(row) > c:
            model(input_ids=torch.tensor([row[c:]], device=device), **{cache_arg: one}, use_cache=True)
            _store(pc, [row], [c], [-head], layer_states(one))  # position j is column j - head
            computed += len(row) - c
        done[tuple(row)] = (c, layer_states(one))
    cached = [done[tuple(r)][0] for r in rows]
    width_c, width_s = max(cached) - head, max(len(r) - c for r, c in zip(rows, cached, strict=True))
    cache = SharedPrefixCache(prefix, len(rows))
    for layer, (ref, _) in enumerate(prefix):
        keys = ref.new_zeros((len(rows), ref.shape[1], width_c + width_s, ref.shape[3]))  # pads stay zero (masked)
        values = torch.zeros_like(keys)
        for r, (row, c) in enumerate(zip(rows, cached, strict=True)):
            k, v = done[tuple(row)][1][layer]
            own, new = c - head, len(row) - c
            keys[r, :, width_c - own : width_c], values[r, :, width_c - own : width_c] = k[0, :, :own], v[0, :, :own]
            if new:
                keys[r, :, width_c + width_s - new :], values[r, :, width_c + width_s - new :] = k[0, :, own:], v[0, :, own:]
        cache.update(keys, values, layer)
    ids = [r[:head] + [pad_id] * (width_c + head - c) + r[head:c] + [pad_id] * (width_s - len(r) + c) + r[c:]
           for r, c in zip(rows, cached, strict=True)]
    mask = [[1] * head + [0] * (width_c + head - c) + [1] * (c - head) + [0] * (width_s - len(r) + c) + [1] * (len(r) - c)
            for r, c in zip(rows, cached, strict=True)]
    pc.record(sum(len(r) + 1 for r in rows), sum(len(r) for r in rows) - computed)  # +1: the last token, run by generate
    return cache, torch.tensor(ids, device=device), torch.tensor(mask, device=device)


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
