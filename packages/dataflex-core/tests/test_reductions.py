"""The masked row reductions of dataflex_core.precomputed equal their full-size expressions, on every path."""

import math

import pytest
import torch

import dataflex_core.precomputed as precomputed
from dataflex_core import (
    Batch,
    InvalidOutputError,
    masked_seq_max,
    masked_seq_mean,
    masked_seq_sum,
    negative_mask,
    nonfinite_mask,
    normalize_mean_one,
    prepare_batch,
)
from dataflex_core.precomputed import row_counts


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 2 rows of 7 (and a short last block), so tiny tensors take the blockwise path."""
    monkeypatch.setattr(precomputed, "BLOCK_ELEMENTS", 16)


def _batch(seed=3):
    gen = torch.Generator().manual_seed(seed)
    bs, length = 11, 7
    lengths = torch.randint(0, length + 1, (bs,), generator=gen)
    lengths[4] = 0
    mask = (torch.arange(length) < lengths.unsqueeze(1)).to(torch.int64)
    return Batch({"response_mask": mask, "advantages": torch.randn(bs, length, generator=gen)})


def _reference(x, mask, fill, reduce):
    return reduce(torch.where(mask.bool(), x, torch.full((), fill, dtype=x.dtype)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("prepared", [False, True])
def test_blockwise_masked_reductions_equal_one_full_size_where(small_blocks, dtype, prepared):
    batch = _batch()
    if prepared:
        prepare_batch(batch)
    mask = batch.batch["response_mask"]
    x = batch.batch["advantages"].to(dtype)
    x = torch.where(mask.bool(), x, torch.full((), float("nan"), dtype=dtype))  # garbage outside the mask
    m = mask.bool()
    counts = m.sum(-1)
    total = _reference(x, m, 0.0, lambda v: v.sum(-1))
    assert torch.equal(masked_seq_sum(x, mask), total)
    assert torch.equal(masked_seq_mean(x, mask), total / counts.clamp(min=1).to(dtype))
    top = _reference(x, m, float("-inf"), lambda v: v.amax(-1))
    assert torch.equal(masked_seq_max(x, mask), torch.where(counts > 0, top, torch.zeros_like(top)))
    # magnitude=True is the reduction of |x|
    ax = x.abs()
    assert torch.equal(masked_seq_sum(x, mask, magnitude=True), _reference(ax, m, 0.0, lambda v: v.sum(-1)))
    top = _reference(ax, m, float("-inf"), lambda v: v.amax(-1))
    assert torch.equal(masked_seq_max(x, mask, magnitude=True), torch.where(counts > 0, top, torch.zeros_like(top)))
    assert masked_seq_sum(x, mask).dtype == dtype


def test_masked_reductions_keep_autograd_and_integer_dtypes(small_blocks):
    x = torch.randn(6, 3, requires_grad=True)
    mask = torch.ones(6, 3, dtype=torch.int64)
    masked_seq_mean(x, mask).sum().backward()
    assert torch.allclose(x.grad, torch.full((6, 3), 1 / 3))
    ints = torch.arange(18).reshape(6, 3)
    assert masked_seq_sum(ints, mask).tolist() == ints.sum(-1).tolist()


def test_row_counts_count_set_positions_without_an_int64_copy(small_blocks):
    mask = torch.rand(9, 7, generator=torch.Generator().manual_seed(0)) > 0.4
    assert torch.equal(row_counts(mask), mask.sum(-1))
    assert torch.equal(row_counts(mask.to(torch.int64)), mask.sum(-1))


@pytest.mark.parametrize("inplace", [False, True])
def test_blockwise_mean_one_matches_the_full_size_path(monkeypatch, inplace):
    gen = torch.Generator().manual_seed(1)
    weights = torch.rand(9, 7, generator=gen) * 3
    valid = torch.rand(9, 7, generator=gen) > 0.3
    weights[~valid] = float("nan")  # garbage outside the valid tokens is ignored
    want = normalize_mean_one(weights.clone(), valid)
    monkeypatch.setattr(precomputed, "BLOCK_ELEMENTS", 16)
    given = weights.clone()
    got = normalize_mean_one(given, valid, inplace=inplace)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0)
    assert (got is given) == inplace
    assert got[valid].mean().item() == pytest.approx(1.0, rel=1e-6) and (got[~valid] == 0).all()


@pytest.mark.parametrize(
    ("bad", "needle"),
    [(float("nan"), "not finite"), (float("inf"), "not finite"), (-1.0, "non-negative"), (0.0, "are zero")],
)
def test_blockwise_mean_one_reports_bad_weights_as_before(small_blocks, bad, needle):
    valid = torch.ones(9, 7, dtype=torch.bool)
    weights = torch.ones(9, 7) if bad != 0.0 else torch.zeros(9, 7)
    weights[5, 3] = bad
    with pytest.raises(InvalidOutputError, match=needle):
        normalize_mean_one(weights, valid)


def test_blockwise_mean_one_survives_a_sum_that_overflows(small_blocks):
    weights = torch.full((9, 7), 3e38)
    got = normalize_mean_one(weights, torch.ones(9, 7, dtype=torch.bool))
    torch.testing.assert_close(got, torch.ones(9, 7))


def test_nonfinite_and_negative_masks_look_at_valid_entries_only():
    values = torch.tensor([[1.0, math.nan, -2.0], [math.inf, 0.5, -0.0]])
    valid = torch.tensor([[True, False, False], [False, True, True]])
    assert nonfinite_mask(values, valid) is None and negative_mask(values, valid) is None
    valid[0, 1] = valid[0, 2] = True
    assert nonfinite_mask(values, valid).tolist() == [[False, True, False], [False, False, False]]
    # A NaN makes the minimum NaN: the negative entry beside it is still found.
    assert negative_mask(values, valid).tolist() == [[False, False, True], [False, False, False]]
    assert nonfinite_mask(torch.tensor([3e38, 3e38]), torch.tensor([True, True])) is None  # the sum overflows
    assert nonfinite_mask(torch.arange(3), torch.ones(3, dtype=torch.bool)) is None


def test_bool_counts_on_the_cpu_match_torch_for_every_layout():
    gen = torch.Generator().manual_seed(4)
    mask = torch.rand(13, 9, generator=gen) > 0.5
    for m in (mask, mask.t(), mask[:, ::2], mask[3], torch.zeros(0, 4, dtype=torch.bool)):
        assert precomputed.count_set(m) == int(torch.count_nonzero(m))
        counts = row_counts(m)
        assert counts.dtype == torch.int64 and torch.equal(counts, torch.count_nonzero(m, dim=-1))
    assert precomputed.count_set(mask.to(torch.int64) * 3) == int(mask.sum())  # nonzero of any dtype is set


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "float64"])
def test_mean_one_in_place_and_copied_agree_for_every_layout(layout):
    gen = torch.Generator().manual_seed(5)
    weights = torch.rand(13, 7, generator=gen) * 2
    valid = torch.rand(13, 7, generator=gen) > 0.3
    weights[~valid] = float("nan")
    if layout == "transposed":
        weights, valid = weights.t(), valid.t()
    if layout == "float64":
        weights = weights.double()
    got = normalize_mean_one(weights.clone(), valid)
    want = torch.where(valid, weights, 0.0)
    want = want * (int(valid.sum()) / want.sum())
    torch.testing.assert_close(got, want.to(got.dtype), rtol=1e-6, atol=0)
    assert got.dtype == weights.dtype and (got[~valid] == 0).all()
    given = weights.clone()
    assert normalize_mean_one(given, valid, inplace=True) is given and torch.equal(given, got)


def test_blocks_stay_under_torchs_parallel_grain_with_several_threads():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert precomputed.block_rows(256) * 256 == precomputed.BLOCK_ELEMENTS
        torch.set_num_threads(2)
        assert precomputed.block_rows(256) * 256 < 32768 and precomputed.block_rows(1 << 16) == 1
        x, mask = torch.randn(300, 256), torch.rand(300, 256) > 0.5
        want = torch.where(mask, x, 0.0).sum(-1)
        assert torch.equal(precomputed.masked_row_reduce(x, mask, 0.0, lambda v: v.sum(-1)), want)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_rows_with_a_nonzero_value_on_the_mask_match_torch_over_many_blocks(dtype):
    """The compute counters' moving rows: a nonzero (or NaN) value on a set mask position; zeros or junk outside
    the mask never count, block by block (several blocks with 2 threads) and in one go alike."""
    from dataflex_core.precomputed import moving_rows

    gen = torch.Generator().manual_seed(9)
    bs, length = 900, 700  # 630k values: several blocks
    lengths = torch.randint(0, length + 1, (bs,), generator=gen)
    mask = torch.arange(length)[None, :] < lengths[:, None]
    x = torch.randn(bs, 1, generator=gen).expand(bs, length).contiguous()
    x[::3] = 0.0  # zero-variance groups
    x[1::7, -1] = 5.0  # junk outside the mask (unless the row is full)
    x[2::11, 0] = float("nan")
    x = x.to(dtype)
    expected = (torch.where(mask, x, torch.zeros((), dtype=dtype)) != 0).any(-1)
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            assert torch.equal(moving_rows(x, mask), expected)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(moving_rows(x, mask.long()), expected)  # a non-bool mask
