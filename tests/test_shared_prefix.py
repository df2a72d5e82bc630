"""Decoding over a shared prefix held once (search/engines/shared_prefix.py): the cascade
attention equals plain attention over the concatenated keys, and the transformers engine's
outputs with it on equal its outputs with it off (greedy, seeded, regex; with and without
the prefix cache), while the cascade path is really taken."""

from __future__ import annotations

import pytest
import torch
from _models import build_models

from common.sampling import SamplingParams
from search.engines import make_engine, shared_prefix
from search.engines.shared_prefix import _attend, attend_math, cascade_attention


def _reference(query, rows_k, rows_v, prefix_k, prefix_v, rows_mask, scale):
    """sdpa over [prefix copied per row | row columns], GQA heads repeated."""
    batch, groups = query.shape[0], query.shape[1] // prefix_k.shape[1]
    keys = torch.cat([prefix_k.expand(batch, -1, -1, -1), rows_k], 2).repeat_interleave(groups, 1)
    values = torch.cat([prefix_v.expand(batch, -1, -1, -1), rows_v], 2).repeat_interleave(groups, 1)
    mask = torch.cat([torch.ones(*rows_mask.shape[:3], prefix_k.shape[2], dtype=torch.bool), rows_mask], -1)
    return torch.nn.functional.scaled_dot_product_attention(query, keys, values, attn_mask=mask, scale=scale)


@pytest.mark.parametrize("length", [1, 5], ids=["decode", "prefill"])
def test_cascade_attention_equals_attention_over_the_concatenated_keys(length):
    gen = torch.Generator().manual_seed(0)
    batch, q_heads, kv_heads, dim, prefix, columns = 3, 4, 2, 8, 11, 7
    rand = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    query = rand(batch, q_heads, length, dim)
    prefix_k, prefix_v = rand(1, kv_heads, prefix, dim), rand(1, kv_heads, prefix, dim)
    rows_k, rows_v = rand(batch, kv_heads, columns, dim), rand(batch, kv_heads, columns, dim)
    mask = torch.ones(columns, columns, dtype=torch.bool).tril()[-length:].expand(batch, 1, length, columns).clone()
    mask[1, :, :, :3] = False  # row 1 is left-padded by 3 columns
    mask[2, :, 0, :] = False  # a query that sees none of its row's columns: the prefix alone
    out = cascade_attention(query, rows_k, rows_v, prefix_k, prefix_v, mask, 0.3)
    torch.testing.assert_close(out, _reference(query, rows_k, rows_v, prefix_k, prefix_v, mask, 0.3))
    assert not out.isnan().any()
    if length > 1:  # no mask: causal, aligned to the last column
        causal = torch.ones(columns, columns, dtype=torch.bool).tril()[-length:].expand(batch, 1, length, columns)
        torch.testing.assert_close(cascade_attention(query, rows_k, rows_v, prefix_k, prefix_v, None, 0.3),
                                   _reference(query, rows_k, rows_v, prefix_k, prefix_v, causal, 0.3))


def test_the_plain_formula_matches_the_cpu_kernel_with_its_log_sum_exp():
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 4, 8, generator=gen) for _ in range(3))
    mask = torch.zeros(2, 1, 4, 4).masked_fill(torch.rand(2, 1, 4, 4, generator=gen) < 0.3, float("-inf"))
    mask[..., 0] = 0.0  # every query sees a column
    for a, b in zip(_attend(q, k, v, mask, 0.5), attend_math(q, k, v, mask, 0.5), strict=True):
        torch.testing.assert_close(a, b)


TASK = "map 3 1 4 8 0 2 5 7 6 9 1 1 4 2 0 3 8 8 5"  # a shared "task" part of several blocks
PROMPTS = [f"{TASK} {tail} =>" for tail in ("1", "2 3", "4 4 4", "9")]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return build_models(tmp_path_factory)


def texts(rows):
    return [[(c.text, c.finish_reason, c.prompt_tokens, c.completion_tokens) for c in row] for row in rows]


@pytest.mark.parametrize("cache_bytes", [0, 2**24], ids=["no-prefix-cache", "prefix-cache"])
@pytest.mark.parametrize("params", [
    SamplingParams(n=1, temperature=0, max_tokens=8),
    SamplingParams(n=3, temperature=1.0, max_tokens=12, seed=3),
    SamplingParams(n=1, temperature=1.0, max_tokens=12, seed=5),
    SamplingParams(n=2, temperature=1.0, min_p=0.05, max_tokens=12, seed=4, regex="( [0-9]){1,4}"),
], ids=["greedy", "seeded-n3", "seeded-n1", "seeded-regex"])
def test_outputs_with_the_shared_prefix_equal_outputs_with_per_row_copies(models, params, cache_bytes, monkeypatch):
    kind = "trained" if params.greedy else "untrained"
    common = dict(checkpoint=models[kind], num_threads=1, batch_size=3, prefix_block_tokens=4,
                  prefix_cache_bytes=cache_bytes)
    copies = make_engine("transformers", shared_prefix=False, **common)
    shared = make_engine("transformers", **common)
    calls = []
    cascade = shared_prefix.cascade_attention
    monkeypatch.setattr(shared_prefix, "cascade_attention", lambda *a: calls.append(a[0].shape) or cascade(*a))
    for _ in range(2):  # with the prefix cache: cold, then warm
        assert texts(shared.generate(PROMPTS, params)) == texts(copies.generate(PROMPTS, params))
    if params.n > 1 or cache_bytes:  # n samples of a prompt, or a batch whose rows share cached blocks
        assert calls and any(shape[0] > 1 for shape in calls)
    else:  # distinct prompts without the prefix cache: nothing known to be shared, the plain batch
        assert not calls


def test_a_prompt_repeated_in_a_batch_runs_once_and_outputs_stay_equal(models):
    params = SamplingParams(n=1, temperature=1.0, max_tokens=10, seed=7)
    batch = [PROMPTS[1], PROMPTS[2], PROMPTS[1], PROMPTS[1], PROMPTS[3]]  # REX often picks a parent twice
    common = dict(checkpoint=models["untrained"], num_threads=1, batch_size=8, prefix_block_tokens=4)
    copies = make_engine("transformers", shared_prefix=False, **common)
    shared = make_engine("transformers", **common)
    assert texts(shared.generate(batch, params)) == texts(copies.generate(batch, params))
    once, each = shared.stats()["prefix_cache"], copies.stats()["prefix_cache"]
    assert once["prompt_tokens"] == each["prompt_tokens"]
    assert once["reused_tokens"] > each["reused_tokens"]  # the repeats' own tokens were not run again
