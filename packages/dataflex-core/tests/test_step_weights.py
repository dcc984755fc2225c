"""Normalisation in the loss's unit, composition with a framework's own weights, and the step's weight metrics."""

from __future__ import annotations

import pytest
import torch

from dataflex_core import InvalidOutputError
from dataflex_core.step import SEQUENCE_UNIT, TOKEN_UNIT, finalize, to_token_weights, unit_mean, weight_metrics

# three rows: lengths 1 and 3, plus a padding/empty row
VALID = torch.tensor([[True, False, False], [True, True, True], [False, False, False]])


def test_sample_weights_are_renormalised_per_token_in_the_token_unit():
    written, factor = finalize(torch.tensor([2.0, 1.0, 5.0]), VALID, TOKEN_UNIT, token_counts=VALID.sum(-1))
    # tokens: one of weight 2, three of weight 1 -> token mean 5/4; the empty row gets 0
    torch.testing.assert_close(written, torch.tensor([1.6, 0.8, 0.0]))
    tokens = to_token_weights(written, VALID)
    torch.testing.assert_close(tokens, torch.tensor([[1.6, 0, 0], [0.8, 0.8, 0.8], [0, 0, 0]]))
    assert unit_mean(tokens, VALID, TOKEN_UNIT).item() == pytest.approx(1.0)
    assert written is factor


def test_token_weights_are_normalised_per_token():
    raw = torch.tensor([[4.0, 9.0, 9.0], [1.0, 1.0, 2.0], [5.0, 5.0, 5.0]])
    written, _ = finalize(raw, VALID, TOKEN_UNIT, token_counts=VALID.sum(-1))
    torch.testing.assert_close(written, torch.tensor([[2.0, 0, 0], [0.5, 0.5, 1.0], [0, 0, 0]]))


def test_sample_weights_keep_their_mean_one_in_the_sequence_unit():
    written, _ = finalize(torch.tensor([1.5, 0.5, 9.0]), VALID, SEQUENCE_UNIT, token_counts=VALID.sum(-1))
    torch.testing.assert_close(written, torch.tensor([1.5, 0.5, 0.0]))
    raw = torch.tensor([[3.0, 7.0, 7.0], [1.0, 1.0, 1.0], [0, 0, 0]])
    token_level, _ = finalize(raw, VALID, SEQUENCE_UNIT, token_counts=VALID.sum(-1))
    assert unit_mean(token_level, VALID, SEQUENCE_UNIT).item() == pytest.approx(1.0)
    torch.testing.assert_close(token_level[1], torch.tensor([0.5, 0.5, 0.5]))


def test_composition_keeps_the_mean_of_the_frameworks_own_weights():
    verl = torch.tensor([[2.0, 0, 0], [1.0, 1.0, 0.5], [0, 0, 0]])
    written, factor = finalize(torch.tensor([1.0, 2.0, 0.0]), VALID, TOKEN_UNIT, verl, token_counts=VALID.sum(-1))
    assert unit_mean(written, VALID, TOKEN_UNIT).item() == pytest.approx(unit_mean(verl, VALID, TOKEN_UNIT).item())
    ratio = written[VALID] / verl[VALID]
    torch.testing.assert_close(ratio, factor[VALID])
    assert ratio[1] / ratio[0] == pytest.approx(2.0)  # the DataFlex preference is kept


def test_all_zero_weights_are_invalid():
    with pytest.raises(InvalidOutputError, match="weight 0"):
        finalize(torch.tensor([0.0, 0.0, 1.0]), VALID, TOKEN_UNIT, token_counts=VALID.sum(-1))


def test_metrics_over_valid_tokens_and_samples():
    factor = torch.tensor([[2.0, 0, 0], [0.0, 0.0, 0.0], [7.0, 7.0, 7.0]])
    valid = torch.tensor([[True, False, False], [True, True, True], [False, False, False]])
    m = weight_metrics(factor, valid, TOKEN_UNIT, token_counts=valid.sum(-1))
    assert m["dataflex/weight/mean"] == m["dataflex/weight/token_mean"] == pytest.approx(0.5)
    assert m["dataflex/weight/unit_is_sequence"] == 0.0 and m["dataflex/weight/composed"] == 0.0
    assert m["dataflex/weight/min"] == 0.0 and m["dataflex/weight/max"] == 2.0
    assert m["dataflex/weight/std"] == pytest.approx(torch.tensor([2.0, 0, 0, 0]).std(unbiased=False).item())
    assert m["dataflex/zero_weight_fraction"] == pytest.approx(0.5)
    assert m["dataflex/ess"] == pytest.approx(1.0)  # one of two samples carries all the weight
    assert m["dataflex/valid_samples"] == 2.0 and m["dataflex/valid_tokens"] == 4.0


@pytest.mark.parametrize("unit", [TOKEN_UNIT, SEQUENCE_UNIT])
def test_per_sample_metrics_match_the_token_level_ones(unit):
    weights = torch.tensor([1.6, 0.8, 0.0])
    compact = weight_metrics(weights, VALID, unit, token_counts=VALID.sum(-1))
    expanded = weight_metrics(to_token_weights(weights, VALID), VALID, unit, token_counts=VALID.sum(-1))
    assert compact.keys() == expanded.keys()
    for key in compact:
        assert compact[key] == pytest.approx(expanded[key], abs=1e-6), key


@pytest.mark.parametrize("per_token", [False, True])
def test_the_headline_mean_is_the_mean_in_the_loss_unit(per_token):
    """Normalised per sequence, the weights' token mean is not 1; the headline mean is."""
    written, factor = finalize(torch.tensor([3.0, 1.0, 0.0]), VALID, SEQUENCE_UNIT, token_counts=VALID.sum(-1))
    if per_token:
        factor = to_token_weights(factor, VALID)
    m = weight_metrics(factor, VALID, SEQUENCE_UNIT, token_counts=VALID.sum(-1))
    assert m["dataflex/weight/mean"] == m["dataflex/weight/factor_mean"] == pytest.approx(1.0)
    assert m["dataflex/weight/unit_is_sequence"] == 1.0
    # 1.5 on one token, 0.5 on three: the token mean the loss does not use
    assert m["dataflex/weight/token_mean"] == pytest.approx(0.75)


@pytest.mark.parametrize("unit", [TOKEN_UNIT, SEQUENCE_UNIT])
def test_with_importance_weights_the_mean_is_relative_to_the_frameworks_weights(unit):
    verl = torch.tensor([[2.0, 0, 0], [1.0, 1.0, 0.5], [0, 0, 0]])
    written, factor = finalize(torch.tensor([1.0, 2.0, 0.0]), VALID, unit, verl, token_counts=VALID.sum(-1))
    m = weight_metrics(factor, VALID, unit, token_counts=VALID.sum(-1), applied=written, importance_weights=verl)
    assert m["dataflex/weight/mean"] == pytest.approx(1.0)
    assert m["dataflex/weight/composed"] == 1.0
    assert m["dataflex/weight/factor_mean"] == pytest.approx(unit_mean(factor, VALID, unit).item())
    assert m["dataflex/weight/factor_mean"] != pytest.approx(1.0)  # the factor alone does not keep the step size


def test_an_unknown_unit_is_refused():
    with pytest.raises(ValueError, match="'tokens'"):
        finalize(torch.tensor([1.0, 1.0, 1.0]), VALID, "tokens", token_counts=VALID.sum(-1))


def test_token_metrics_over_many_row_blocks_match_a_float64_reference():
    """The CPU metrics pass goes block by block through a float64 buffer: its statistics equal the whole-tensor
    float64 ones, junk on invalid tokens (even NaN) never counts, and float32 / float64 factors agree."""
    gen = torch.Generator().manual_seed(5)
    bs, length = 700, 1500  # about four row blocks
    lengths = torch.randint(0, length + 1, (bs,), generator=gen)
    valid = torch.arange(length)[None, :] < lengths[:, None]
    factor = torch.rand(bs, length, generator=gen) * 3
    factor[~valid] = float("nan")
    factor[0, :] = 5.0  # a row whose valid tokens all weigh the same
    w = torch.where(valid, factor.double(), torch.zeros((), dtype=torch.float64))
    counts = valid.sum(-1)
    n = int(counts.sum())
    per_sample = (w.sum(-1) / counts.clamp(min=1))[counts > 0]
    expected = {
        "dataflex/weight/token_mean": float(w.sum() / n),
        "dataflex/weight/std": float(((w * w).sum() / n - (w.sum() / n) ** 2).sqrt()),
        "dataflex/weight/min": float(factor.double()[valid].min()),
        "dataflex/weight/max": float(factor.double()[valid].max()),
        "dataflex/ess": float(per_sample.sum() ** 2 / (per_sample**2).sum()),
    }
    for dtype in (torch.float32, torch.float64):
        m = weight_metrics(factor.to(dtype), valid, TOKEN_UNIT, token_counts=valid.sum(-1))
        for key, value in expected.items():
            assert m[key] == pytest.approx(value, rel=1e-12), (dtype, key)
        assert m["dataflex/valid_tokens"] == float(n)


@pytest.mark.parametrize("unit", [TOKEN_UNIT, SEQUENCE_UNIT])
def test_token_weights_over_many_chunks_are_normalised_as_the_formula_says(unit):
    """The CPU pass that masks the weights also sums them (float32 chunks added in float64): the factor is the
    masked weights over their mean in the unit, 0 on invalid tokens whatever they held."""
    gen = torch.Generator().manual_seed(6)
    bs, length = 400, 1800  # 720k tokens: several chunks
    lengths = torch.randint(0, length + 1, (bs,), generator=gen)
    valid = torch.arange(length)[None, :] < lengths[:, None]
    raw = torch.rand(bs, length, generator=gen) * 4
    raw[~valid] = 1e30  # junk a framework leaves outside the mask
    applied, factor = finalize(raw, valid, unit, token_counts=valid.sum(-1))
    assert applied is factor and factor.dtype == torch.float32
    assert (factor[~valid] == 0).all() and raw[~valid].eq(1e30).all()  # the input is not changed
    masked = torch.where(valid, raw.double(), torch.zeros((), dtype=torch.float64))
    mean = unit_mean(masked, valid, unit, masked=True)
    torch.testing.assert_close(factor.double(), masked / mean, rtol=1e-6, atol=1e-7)
    assert float(unit_mean(factor.double(), valid, unit, masked=True)) == pytest.approx(1.0, abs=1e-6)
