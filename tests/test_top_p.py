"""The sort-free top-p (search/engines/top_p.py) keeps exactly the tokens vLLM's sort keeps."""

from __future__ import annotations

import pytest
import torch

from search.engines.top_p import top_k_only, top_p_by_candidates, top_p_by_sort


def logits_rows(seed: int, rows: int = 12, vocab: int = 5000) -> torch.Tensor:
    """Rows from peaked to flat: the flat ones have a nucleus wider than 64 candidates."""
    g = torch.Generator().manual_seed(seed)
    scale = torch.linspace(8.0, 0.05, rows).unsqueeze(1)
    return torch.randn(rows, vocab, generator=g) * scale


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("candidates", [1, 64, 6000])
def test_the_mask_is_the_sorts_for_every_row_peaked_or_flat(seed: int, candidates: int) -> None:
    logits = logits_rows(seed)
    p = torch.tensor([0.9, 0.95, 0.5, 1.0, 0.99, 0.3, 0.95, 0.7, 0.8, 1.0, 0.95, 0.6])
    expected = top_p_by_sort(logits.clone(), None, p)
    got = top_p_by_candidates(logits.clone(), None, p, candidates)
    assert torch.equal(torch.isinf(got), torch.isinf(expected))
    assert torch.equal(got[~torch.isinf(got)], logits[~torch.isinf(expected)])  # kept logits untouched
    kept = (~torch.isinf(expected)).sum(dim=1)
    assert kept[3] == kept[9] == logits.shape[1] and kept[0] < 64 < kept[-1]  # p = 1 keeps all; peaked and flat rows


def test_top_k_then_top_p_and_top_k_alone_match_the_sort() -> None:
    logits = logits_rows(3)
    k = torch.tensor([5, 50, 5000, 1, 20, 3000, 7, 5000, 100, 40, 10, 2])
    p = torch.full((12,), 0.9)
    expected = top_p_by_sort(logits.clone(), k, p)
    assert torch.equal(torch.isinf(top_p_by_candidates(logits.clone(), k, p, 32)), torch.isinf(expected))
    alone = top_k_only(logits.clone(), k)
    assert torch.equal(torch.isinf(alone), torch.isinf(top_p_by_sort(logits.clone(), k, None)))
    assert (~torch.isinf(alone)).sum(dim=1).tolist() == k.tolist()
    assert top_p_by_candidates(logits, None, None) is logits  # nothing asked: the row as it came


def test_candidates_must_be_positive() -> None:
    with pytest.raises(ValueError, match="candidates=0 must be >= 1"):
        top_p_by_candidates(logits_rows(0), None, torch.full((12,), 0.9), 0)
