"""kth_smallest is exact on the bracketed path, on its fallback, and with ties."""

import numpy as np
import pytest
import torch
from dataflex_reweighters_token import selection
from dataflex_reweighters_token.selection import kth_smallest, select_kth


@pytest.fixture
def small_limits(monkeypatch):
    """Force the bracketed path on tensors small enough for a unit test."""
    monkeypatch.setattr(selection, "DIRECT_LIMIT", 64)
    monkeypatch.setattr(selection, "SAMPLE_SIZE", 1000)


LAYOUTS = {
    "random": lambda g: torch.randn(5000, generator=g),
    "ties": lambda g: torch.randint(0, 7, (5000,), generator=g).float(),
    "sorted": lambda g: torch.sort(torch.randn(5000, generator=g)).values,
    # A flattened (bs, L) batch: ragged rows with -inf after each response.
    "rows": lambda g: torch.where(
        torch.arange(50).expand(100, 50) < torch.randint(1, 51, (100, 1), generator=g),
        torch.rand(100, 50, generator=g),
        float("-inf"),
    ).reshape(-1),
    "mostly_neg_inf": lambda g: torch.cat([torch.full((4000,), float("-inf")), torch.rand(1000, generator=g)]),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("k", [1, 2, 777, 2500, 4001, 4999, 5000])
def test_matches_kthvalue(small_limits, layout, k):
    values = LAYOUTS[layout](torch.Generator().manual_seed(k))
    assert kth_smallest(values, k).item() == values.kthvalue(k).values.item()


def test_direct_path_and_bad_k():
    values = torch.tensor([3.0, 1.0, 2.0])
    assert kth_smallest(values, 2).item() == 2.0
    with pytest.raises(ValueError, match="k=4"):
        kth_smallest(values, 4)


def test_bracket_selects_over_a_small_band_of_random_values(small_limits, monkeypatch):
    sizes = []
    kth = selection._NumpyOps.kth

    def spy(self, pool, k):
        sizes.append(len(pool))
        return kth(self, pool, k)

    monkeypatch.setattr(selection._NumpyOps, "kth", spy)
    values = torch.randn(5000, generator=torch.Generator().manual_seed(0))
    assert kth_smallest(values, 4000).item() == values.kthvalue(4000).values.item()
    assert sizes and max(sizes) < 2000, f"selected over {sizes} values; the bracket should cut most of 5000"


def test_a_fooled_sample_falls_back_to_an_exact_answer(small_limits, monkeypatch):
    # Every sampled position is 0, so the bracket is [v0, v0] and misses rank 2500.
    monkeypatch.setattr(selection, "sample_positions", lambda n, size: np.zeros(size, dtype=np.int64))
    values = torch.randn(5000, generator=torch.Generator().manual_seed(3))
    assert kth_smallest(values, 2500).item() == values.kthvalue(2500).values.item()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("k", [1, 777, 4001, 5000])
def test_chunked_comparisons_match_kthvalue(small_limits, monkeypatch, layout, k):
    monkeypatch.setattr(selection, "CHUNK", 333)  # many chunks and a short last one
    values = LAYOUTS[layout](torch.Generator().manual_seed(k))
    assert kth_smallest(values, k).item() == values.kthvalue(k).values.item()


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("share", "k"), [(0.6, 1), (0.6, 777), (0.6, 2900), (0.05, 3), (0.05, 200)])
def test_masked_selection_counts_the_values_below(small_limits, monkeypatch, backend, layout, share, k):
    # The torch path is what runs on a GPU (and for bf16): same answers as the numpy path.
    if backend == "torch":
        monkeypatch.setattr(selection, "numpy_view", lambda x: None)
    gen = torch.Generator().manual_seed(k)
    values = LAYOUTS[layout](gen)
    valid = torch.rand(values.shape, generator=gen) < share
    pool = values[valid]
    value, below = select_kth(values, k, valid)
    want = pool.kthvalue(k).values
    assert value.item() == want.item() and value.dtype == values.dtype and value.dim() == 0
    assert below == int((pool < want).sum())
    with pytest.raises(ValueError, match=f"outside 1..{pool.numel()}"):
        select_kth(values, pool.numel() + 1, valid)
