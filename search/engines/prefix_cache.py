"""A bounded cache of prompt KV states shared across requests, keyed by token prefix.

The prompts of one SOAR task share most of their text (the task's grids), batch after
batch; computing that text's keys and values once and reusing them is what vLLM's
automatic prefix caching does, and this is the same scheme for the transformers engine:
- prompts are cut into fixed-size blocks of tokens; a block's key hashes its tokens
  together with the key of the block before it (a hash chain), so one key names a whole
  prefix, and two prompts share exactly the blocks of their common full-block prefix;
- a block's value is whatever the engine stores for it (here: per layer, the block's keys
  and values), with its size in bytes; the cache never looks inside;
- the least recently used blocks go first when the byte budget is full. A prefix is
  touched from its last block to its first, so a chain is evicted from its tail and a
  cached block's ancestors stay cached (as vLLM's free-block queue does).
Hashes are SHA-256 over the token ids (vLLM's default): a collision would serve another
prompt's states silently, so a fast non-cryptographic hash is not worth the risk.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_BLOCK_TOKENS = 16  # vLLM's default block size
DEFAULT_MAX_BYTES = 512 * 2**20
KEY_MEMO = 256  # prompts whose block hashes are remembered (more than one batch's rows)


@dataclass
class _Block:
    value: Any
    nbytes: int


class PrefixCache:
    """Blocks of per-prefix state, LRU-evicted within `max_bytes`. Not thread-safe: the
    engine that owns it generates one request at a time."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, block_tokens: int = DEFAULT_BLOCK_TOKENS):
        if max_bytes < 0:
            raise ValueError(f"prefix cache max_bytes={max_bytes} must be >= 0 (0 turns the cache off)")
        if block_tokens < 1:
            raise ValueError(f"prefix cache block_tokens={block_tokens} must be >= 1")
        self.max_bytes, self.block_tokens = max_bytes, block_tokens
        self._blocks: OrderedDict[bytes, _Block] = OrderedDict()  # least recently used first
        # a prompt is looked up, matched and stored within one call: hash its blocks once
        self._keys: OrderedDict[tuple[int, ...], list[bytes]] = OrderedDict()
        self.bytes = 0
        self.prompt_tokens = 0  # tokens of the prompts looked up
        self.reused_tokens = 0  # of which served from the cache
        self.evictions = 0  # blocks dropped for room

    def block_keys(self, tokens: Sequence[int]) -> list[bytes]:
        """The hash chain over the full blocks of `tokens` (a partial last block has no key)."""
        whole = tuple(tokens)
        if (keys := self._keys.get(whole)) is not None:
            self._keys.move_to_end(whole)
            return keys
        keys = self._chain(tokens)
        self._keys[whole] = keys
        if len(self._keys) > KEY_MEMO:
            self._keys.popitem(last=False)
        return keys

    def _chain(self, tokens: Sequence[int]) -> list[bytes]:
        keys, parent = [], b""
        size = self.block_tokens
        for start in range(0, len(tokens) - size + 1, size):
            parent = hashlib.sha256(parent + array("q", tokens[start : start + size]).tobytes()).digest()
            keys.append(parent)
        return keys

    def match(self, tokens: Sequence[int]) -> list[Any]:
        """Values of the longest cached full-block prefix of `tokens`, first block first
        (it covers len(result) * block_tokens tokens). Marks them recently used."""
        found: list[bytes] = []
        for key in self.block_keys(tokens):
            if key not in self._blocks:
                break
            found.append(key)
        for key in reversed(found):  # the first block ends up most recent: tails are evicted first
            self._blocks.move_to_end(key)
        return [self._blocks[k].value for k in found]

    def record(self, prompt_tokens: int, reused_tokens: int) -> None:
        """Count one prompt's tokens and how many of them were served from the cache."""
        self.prompt_tokens += prompt_tokens
        self.reused_tokens += reused_tokens

    def insert(self, tokens: Sequence[int], first_block: int, values: Sequence[tuple[Any, int]]) -> None:
        """Store blocks first_block.. of `tokens`: values[i] = (state of that block, its bytes).
        Blocks already cached are kept as they are; blocks that cannot fit are not stored."""
        keys = self.block_keys(tokens)
        if first_block + len(values) > len(keys):
            raise ValueError(f"blocks {first_block}..{first_block + len(values) - 1} asked for, but "
                             f"{len(tokens)} tokens hold {len(keys)} full blocks")
        chain = keys[: first_block + len(values)]
        for key, (value, nbytes) in zip(keys[first_block:], values, strict=False):
            if key in self._blocks:
                continue
            self._make_room(nbytes, keep=chain)
            if self.bytes + nbytes > self.max_bytes:
                break  # no room even after evicting: later blocks would be unreachable anyway
            self._blocks[key] = _Block(value, nbytes)
            self.bytes += nbytes
        # the prefix just stored is the most recently used, its first block last
        for key in reversed([k for k in chain if k in self._blocks]):
            self._blocks.move_to_end(key)

    def _make_room(self, nbytes: int, keep: Sequence[bytes]) -> None:
        if self.bytes + nbytes <= self.max_bytes:
            return  # the usual case: no walk over every block
        protected = set(keep)  # never evict the chain being stored: its tail would lose its head
        evictable = sum(b.nbytes for k, b in self._blocks.items() if k not in protected)
        if self.bytes - evictable + nbytes > self.max_bytes:
            return  # it cannot fit whatever goes: keep what is cached (the caller stores nothing)
        for key in list(self._blocks):
            if self.bytes + nbytes <= self.max_bytes:
                return
            if key in protected:
                continue
            self.bytes -= self._blocks.pop(key).nbytes
            self.evictions += 1

    def clear(self) -> None:
        """Drop every block (new weights: every cached state is stale)."""
        self._blocks.clear()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def stats(self) -> dict[str, Any]:
        hit = self.reused_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
        return dict(enabled=True, hit_rate=hit, prompt_tokens=self.prompt_tokens, reused_tokens=self.reused_tokens,
                    bytes=self.bytes, max_bytes=self.max_bytes, blocks=len(self._blocks), evictions=self.evictions,
                    block_tokens=self.block_tokens)
