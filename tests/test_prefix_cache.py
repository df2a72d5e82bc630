"""The cross-request prefix cache: its block hashing and LRU-by-bytes eviction, and the
transformers engine's outputs with it on, equal to its outputs with it off (greedy and
seeded sampling, strict prefixes, eviction, batches mixing hits and misses)."""

from __future__ import annotations

import pytest
from _models import build_models

from common.sampling import SamplingParams
from search.engines import make_engine
from search.engines.prefix_cache import PrefixCache

# --- the cache on its own ----------------------------------------------------------------


def test_blocks_are_a_hash_chain_over_full_blocks():
    cache = PrefixCache(max_bytes=100, block_tokens=4)
    a = cache.block_keys(list(range(10)))
    assert len(a) == 2  # the last 2 tokens are a partial block: no key
    assert cache.block_keys(list(range(8)) + [99, 98]) == a
    # the same block after another first block has another key: a key names the whole prefix
    b = cache.block_keys([7, 7, 7, 7] + list(range(4, 8)))
    assert b[0] != a[0] and b[1] != a[1]


def test_match_returns_the_longest_cached_prefix_and_a_strict_prefix_hits():
    cache = PrefixCache(max_bytes=100, block_tokens=4)
    tokens = list(range(12))
    cache.insert(tokens, 0, [("b0", 1), ("b1", 1), ("b2", 1)])
    assert cache.match(tokens + [5, 5]) == ["b0", "b1", "b2"]
    assert cache.match(tokens[:9]) == ["b0", "b1"]  # a strict prefix of a cached prompt
    assert cache.match(tokens[:4] + [0] * 8) == ["b0"]  # diverges in block 1
    assert cache.match([1] + tokens[1:]) == []
    cache.insert(tokens, 1, [("other", 1)])  # already cached: kept as it was
    assert cache.match(tokens)[1] == "b1" and cache.bytes == 3
    with pytest.raises(ValueError, match="blocks 3..3 asked for, but 12 tokens hold 3 full blocks"):
        cache.insert(tokens, 3, [("x", 1)])


def test_eviction_is_lru_by_bytes_and_takes_chains_from_their_tail():
    cache = PrefixCache(max_bytes=10, block_tokens=2)
    first, second = [1, 1, 2, 2, 3, 3], [4, 4, 5, 5]
    cache.insert(first, 0, [("a0", 3), ("a1", 3), ("a2", 3)])
    cache.insert(second, 0, [("b0", 3), ("b1", 3)])  # needs 6 bytes: 5 are taken from `first`'s tail
    assert cache.bytes <= 10 and cache.evictions == 2
    assert cache.match(first) == ["a0"]  # the head survived, the tail went first
    assert cache.match(second) == ["b0", "b1"]
    cache.match(first)  # `first` is now the most recently used ...
    cache.insert([6, 6], 0, [("c0", 3)])  # ... so `second` pays for the room, again from its tail
    assert cache.match(second) == ["b0"] and cache.match(first) == ["a0"] and cache.match([6, 6]) == ["c0"]
    cache.insert([7, 7], 0, [("huge", 11)])  # bigger than the budget: not stored, nothing evicted for it
    assert cache.match([7, 7]) == [] and cache.bytes <= 10
    cache.clear()
    assert cache.bytes == 0 and len(cache) == 0 and cache.match(first) == []


def test_bad_budget_or_block_size_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="max_bytes=-1"):
        PrefixCache(max_bytes=-1)
    with pytest.raises(ValueError, match="block_tokens=0"):
        PrefixCache(max_bytes=1, block_tokens=0)


# edges found by `make mutate MODULES=prefix_cache` (issue 46); names carry one of the words
# the target's -k selects (blocks, longest, lru, budget)


def test_the_defaults_are_16_token_blocks_and_a_512_mib_budget_as_documented():
    cache = PrefixCache()
    assert (cache.block_tokens, cache.max_bytes) == (16, 512 * 2**20)  # docs/sampling.md


def test_the_smallest_budget_and_block_size_allowed_work():
    off = PrefixCache(max_bytes=0, block_tokens=1)  # 0 bytes: the cache stores nothing
    assert off.block_keys([5, 6, 7]) and len(off.block_keys([5, 6, 7])) == 3
    off.insert([5, 6, 7], 0, [("a", 1)])
    assert len(off) == 0 and off.match([5, 6, 7]) == []


def test_only_full_blocks_get_keys_one_token_short_of_two_blocks_is_one():
    cache = PrefixCache(max_bytes=100, block_tokens=4)
    assert len(cache.block_keys(list(range(7)))) == 1
    assert len(cache.block_keys(list(range(8)))) == 2


def test_blocks_that_fill_the_budget_exactly_all_stay():
    cache = PrefixCache(max_bytes=6, block_tokens=2)
    cache.insert([1, 1], 0, [("a", 3)])
    cache.insert([2, 2], 0, [("b", 3)])
    assert cache.bytes == 6 and cache.evictions == 0
    assert cache.match([1, 1]) == ["a"] and cache.match([2, 2]) == ["b"]
    cache.insert([3, 3], 0, [("c", 3)])  # evicting the least recently used block makes exactly enough room
    assert cache.evictions == 1 and cache.match([2, 2]) == ["b"] and cache.match([1, 1]) == []


def test_a_cached_block_is_not_served_without_the_blocks_before_it():
    cache = PrefixCache(max_bytes=100, block_tokens=2)
    cache.insert([1, 1, 2, 2], 1, [("second", 1)])  # block 0 never stored
    assert len(cache) == 1 and cache.match([1, 1, 2, 2]) == []


def test_a_block_that_cannot_fit_evicts_nothing_for_it():
    """A block bigger than what eviction could free is not stored, and the cache keeps every
    block it had: evicting them all first, then storing nothing, emptied it (issue #46's run)."""
    cache = PrefixCache(max_bytes=10, block_tokens=2)
    cache.insert([1, 1, 2, 2], 0, [("a0", 3), ("a1", 3)])
    cache.insert([7, 7], 0, [("huge", 11)])
    assert cache.match([7, 7]) == [] and cache.match([1, 1, 2, 2]) == ["a0", "a1"]
    assert cache.evictions == 0 and cache.bytes == 6
    prompt = [3, 3, 4, 4]  # the chain being stored is protected, so 5 + 6 cannot fit either
    cache.insert(prompt, 0, [("p0", 5), ("p1", 6)])
    assert cache.match(prompt) == ["p0"] and cache.match([1, 1, 2, 2]) == ["a0"]  # a1 paid for p0 alone
    assert cache.evictions == 1 and cache.bytes == 8


def test_blocks_after_one_that_does_not_fit_are_not_stored_unreachable():
    cache = PrefixCache(max_bytes=10, block_tokens=2)
    cache.insert([1, 1, 2, 2], 0, [("big", 20), ("small", 5)])
    assert len(cache) == 0 and cache.bytes == 0


def test_a_longer_prompt_stores_the_blocks_after_its_cached_prefix():
    cache = PrefixCache(max_bytes=100, block_tokens=2)
    cache.insert([1, 1], 0, [("a0", 1)])
    cache.insert([1, 1, 2, 2, 3, 3], 0, [("new0", 1), ("a1", 1), ("a2", 1)])
    assert cache.match([1, 1, 2, 2, 3, 3]) == ["a0", "a1", "a2"]  # block 0 kept as it was


def test_lru_eviction_passes_over_the_chain_being_stored_to_older_blocks():
    cache = PrefixCache(max_bytes=30, block_tokens=2)
    prompt = [1, 1, 2, 2, 3, 3]
    cache.insert(prompt[:4], 0, [("p0", 10), ("p1", 10)])
    cache.insert([9, 9], 0, [("q0", 10)])  # the most recent: `prompt`'s blocks are older
    cache.insert(prompt, 2, [("p2", 10)])  # its own head and middle are protected: q0 pays
    assert cache.match(prompt) == ["p0", "p1", "p2"] and cache.match([9, 9]) == []
    assert cache.evictions == 1


def test_budget_stats_report_the_hit_rate_as_reused_over_prompt_tokens():
    cache = PrefixCache(max_bytes=100, block_tokens=4)
    fresh = cache.stats()
    assert fresh["enabled"] is True
    assert (fresh["hit_rate"], fresh["prompt_tokens"], fresh["reused_tokens"]) == (0.0, 0, 0)
    cache.record(40, 10)
    cache.record(40, 20)
    stats = cache.stats()
    assert (stats["hit_rate"], stats["prompt_tokens"], stats["reused_tokens"]) == (0.375, 80, 30)


# --- the transformers engine: on == off -------------------------------------------------

TASK = "map 3 1 4 8 0 2 5 7 6 9 1 1 4 2 0 3 8 8 5"  # a shared "task" part of several blocks
PROMPTS = [f"{TASK} {tail} =>" for tail in ("1", "2 3", "4 4 4", "9")]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return build_models(tmp_path_factory)


def engines(models, kind: str, **on):
    off = make_engine("transformers", checkpoint=models[kind], num_threads=1, prefix_cache_bytes=0, batch_size=3)
    cached = make_engine("transformers", checkpoint=models[kind], num_threads=1, batch_size=3,
                         prefix_block_tokens=4, **on)
    return off, cached


def texts(rows):
    return [[(c.text, c.finish_reason, c.prompt_tokens, c.completion_tokens) for c in row] for row in rows]


@pytest.mark.parametrize("params", [
    SamplingParams(n=1, temperature=0, max_tokens=8),
    SamplingParams(n=3, temperature=0, max_tokens=8),
    SamplingParams(n=1, temperature=1.0, max_tokens=12, seed=3),
    SamplingParams(n=3, temperature=1.0, max_tokens=12, seed=3),
    SamplingParams(n=2, temperature=1.0, min_p=0.05, max_tokens=12, seed=4, regex="( [0-9]){1,4}"),
], ids=["greedy", "greedy-n3", "seeded", "seeded-n3-shared-prefill", "seeded-regex"])
def test_outputs_with_the_cache_equal_outputs_without(models, params):
    kind = "trained" if params.greedy else "untrained"
    off, on = engines(models, kind)
    expected = [texts(off.generate(PROMPTS, params)) for _ in range(2)]
    assert expected[0] == expected[1]
    first = texts(on.generate(PROMPTS, params))  # cold: misses, then later prompts hit the task's blocks
    second = texts(on.generate(PROMPTS, params))  # warm: every prompt hits
    assert first == expected[0] and second == expected[0]
    stats = on.stats()["prefix_cache"]
    assert stats["reused_tokens"] > 0 and 0 < stats["hit_rate"] < 1 and stats["bytes"] > 0
    assert off.stats() == {"prefix_cache": {"enabled": False}}


def test_strict_prefixes_mixed_batches_and_eviction_keep_outputs_equal(models):
    params = SamplingParams(n=1, temperature=1.0, max_tokens=10, seed=11)
    off, on = engines(models, "untrained")
    longest = PROMPTS[2]
    on.generate([longest], params)  # cached first; then prompts that are strict prefixes of it
    prefixes = [longest[:k] for k in (len(TASK) - 5, len(TASK), len(longest) - 3)]
    assert texts(on.generate(prefixes, params)) == texts(off.generate(prefixes, params))
    mixed = ["map 0 0 7 =>", PROMPTS[1], "map 5 5 5 5 5 5 5 5 5 5 =>", PROMPTS[0], "map 6 =>"]  # hits and misses
    assert texts(on.generate(mixed, params)) == texts(off.generate(mixed, params))
    # a budget of a few blocks: every call evicts, and outputs still match
    block = on.prefix_cache.stats()["bytes"] // max(len(on.prefix_cache), 1)
    small = make_engine("transformers", checkpoint=models["untrained"], num_threads=1, batch_size=3,
                        prefix_block_tokens=4, prefix_cache_bytes=3 * block)
    for _ in range(2):
        assert texts(small.generate(PROMPTS + mixed, params)) == texts(off.generate(PROMPTS + mixed, params))
    stats = small.stats()["prefix_cache"]
    assert stats["evictions"] > 0 and stats["bytes"] <= 3 * block and stats["reused_tokens"] > 0


def test_load_drops_states_of_the_previous_weights(models):
    engine = make_engine("transformers", checkpoint=models["untrained"], num_threads=1, prefix_block_tokens=4)
    engine.generate(PROMPTS, SamplingParams(max_tokens=2, seed=0))
    assert engine.prefix_cache.bytes > 0
    engine.load(models["trained"], "v1")
    assert engine.prefix_cache.bytes == 0 and len(engine.prefix_cache) == 0
    greedy = SamplingParams(temperature=0, max_tokens=8)
    off = make_engine("transformers", checkpoint=models["trained"], num_threads=1, prefix_cache_bytes=0)
    assert texts(engine.generate(PROMPTS, greedy)) == texts(off.generate(PROMPTS, greedy))


def test_search_entries_report_the_prefix_cache_use_between_two_readings():
    from evolution.metrics import prefix_cache_use
    from search.pool import ActorStats

    def reading(prompt: int, reused: int, held: int, enabled: bool = True) -> ActorStats:
        cache = dict(enabled=True, prompt_tokens=prompt, reused_tokens=reused, bytes=held) if enabled else {"enabled": False}
        return ActorStats(index=0, version="v0", busy_s=0.0, tokens_generated=0, requests=0, running=0, cancelled=0, queue_depth=0, niceness=0,
                          restarts=0, engine={"prefix_cache": cache})

    use = prefix_cache_use([reading(100, 20, 5)], [reading(300, 170, 9)])
    assert use == {"prompt_tokens": 200, "reused_tokens": 150, "hit_rate": 0.75, "bytes": 9}
    assert prefix_cache_use([reading(0, 0, 0, False)], [reading(0, 0, 0, False)]) == {}
