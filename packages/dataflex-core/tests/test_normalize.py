import pytest
import torch

from dataflex_core import Batch, InvalidOutputError, mean_one, normalize_mean_one, valid_sample_mask, valid_token_mask


def _batch(mask, padding=None):
    fields = {"response_mask": torch.tensor(mask)}
    if padding is not None:
        fields["is_padding"] = torch.tensor(padding)
    return Batch(fields)


def test_valid_masks_exclude_padding_and_empty_rows():
    b = _batch([[1, 1, 0], [0, 0, 0], [1, 0, 0], [1, 1, 1]], padding=[False, False, False, True])
    assert valid_sample_mask(b).tolist() == [True, False, True, False]
    assert valid_token_mask(b).sum().item() == 3


def test_sample_weights_have_mean_one_over_valid_samples_and_zero_elsewhere():
    b = _batch([[1, 1], [0, 0], [1, 0], [1, 1]], padding=[False, False, False, True])
    w = mean_one(torch.tensor([1.0, 50.0, 3.0, 7.0]), b)
    assert w.tolist() == pytest.approx([0.5, 0.0, 1.5, 0.0])
    assert w.dtype == torch.float32


def test_token_weights_have_mean_one_over_valid_tokens():
    b = _batch([[1, 1, 0], [1, 0, 0]])
    w = mean_one(torch.tensor([[1.0, 2.0, 100.0], [3.0, 9.0, 9.0]]), b)
    valid = valid_token_mask(b)
    assert w[valid].mean().item() == pytest.approx(1.0)
    assert w[~valid].abs().sum().item() == 0.0
    assert w[0, :2].tolist() == pytest.approx([0.5, 1.0]) and w[1, 0].item() == pytest.approx(1.5)


def test_half_precision_inputs_give_float32():
    w = normalize_mean_one(torch.tensor([1.0, 3.0], dtype=torch.bfloat16), torch.tensor([True, True]))
    assert w.dtype == torch.float32 and w.tolist() == pytest.approx([0.5, 1.5])


def test_huge_finite_weights_do_not_overflow():
    w = normalize_mean_one(torch.tensor([3e38, 3e38, 1e38]), torch.tensor([True, True, True]))
    assert torch.isfinite(w).all() and w.mean().item() == pytest.approx(1.0, rel=1e-5)


@pytest.mark.parametrize(
    ("weights", "needle"),
    [
        ([0.0, 0.0], "all 2 valid weights are zero"),
        ([1.0, -0.5], "non-negative"),
        ([1.0, float("nan")], "not finite"),
        ([float("inf"), 1.0], "not finite"),
    ],
)
def test_bad_weights_raise_a_clear_error(weights, needle):
    with pytest.raises(InvalidOutputError, match=needle):
        normalize_mean_one(torch.tensor(weights), torch.tensor([True, True]))


def test_invalid_entries_may_hold_anything():
    w = normalize_mean_one(torch.tensor([2.0, float("nan"), -1.0]), torch.tensor([True, False, False]))
    assert w.tolist() == [1.0, 0.0, 0.0]


def test_shape_mismatch_is_reported():
    with pytest.raises(InvalidOutputError, match=r"shape \(3,\) does not match"):
        normalize_mean_one(torch.ones(3), torch.ones(2, 3, dtype=torch.bool))


def test_inplace_scales_the_callers_temporary_and_matches_the_copying_result():
    valid = torch.tensor([[True, True, False], [True, False, False]])
    weights = torch.tensor([[1.0, 2.0, float("nan")], [3.0, 9.0, -4.0]])
    expected = normalize_mean_one(weights, valid)
    out = normalize_mean_one(weights, valid, inplace=True)
    assert out.data_ptr() == weights.data_ptr()
    assert torch.equal(out, expected) and out.tolist() == [[0.5, 1.0, 0.0], [1.5, 0.0, 0.0]]
    half = torch.tensor([1.0, 3.0], dtype=torch.bfloat16)
    normalize_mean_one(half, torch.tensor([True, True]), inplace=True)
    assert half.tolist() == [1.0, 3.0], "a dtype conversion copies, so the input is untouched"
