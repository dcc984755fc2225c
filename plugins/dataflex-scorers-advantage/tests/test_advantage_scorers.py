"""advantage_magnitude and advantage_signed against hand-computed cases."""

import math

import pytest
import torch
from dataflex_scorers_advantage import AdvantageMagnitudeScorer, AdvantageSignedScorer

from dataflex_core import Batch

ADV = torch.tensor([[1.0, -2.0, 3.0, 0.5], [-1.0, -1.0, 0.0, 0.0], [4.0, 4.0, 4.0, 4.0]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]])


def batch(adv=ADV, mask=MASK, **extra):
    return Batch({"advantages": adv, "response_mask": mask, **extra})


@pytest.mark.parametrize(
    ("agg", "expected"),
    [("mean", [2.0, 1.0, 0.0]), ("sum", [6.0, 2.0, 0.0]), ("max", [3.0, 1.0, 0.0])],
)
def test_magnitude_aggregations_match_hand_computation(agg, expected):
    out = AdvantageMagnitudeScorer(agg=agg).score(batch(), step_id=0)
    assert out.shape == (3,) and out.dtype == torch.float32
    torch.testing.assert_close(out, torch.tensor(expected))


def test_signed_is_masked_mean_of_advantages():
    out = AdvantageSignedScorer().score(batch(), step_id=0)
    torch.testing.assert_close(out, torch.tensor([2.0 / 3.0, -1.0, 0.0]))


@pytest.mark.parametrize("agg", ["mean", "sum", "max"])
def test_masked_positions_are_never_read(agg):
    poisoned = ADV.clone()
    poisoned[MASK == 0] = math.nan
    clean = AdvantageMagnitudeScorer(agg=agg).score(batch(), 0)
    assert torch.equal(AdvantageMagnitudeScorer(agg=agg).score(batch(poisoned), 0), clean)
    assert torch.isfinite(AdvantageSignedScorer().score(batch(poisoned), 0)).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_inputs_give_float32_scores(dtype):
    out = AdvantageMagnitudeScorer().score(batch(ADV.to(dtype)), 0)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, torch.tensor([2.0, 1.0, 0.0]))
    assert AdvantageSignedScorer().score(batch(ADV.to(dtype)), 0).dtype == torch.float32


def test_long_bf16_response_is_summed_in_float32():
    # 4096 tokens of 0.01: a bf16 running sum stalls far below 40.96.
    adv = torch.full((1, 4096), 0.01, dtype=torch.bfloat16)
    out = AdvantageMagnitudeScorer(agg="sum").score(batch(adv, torch.ones(1, 4096, dtype=torch.long)), 0)
    assert out.item() == pytest.approx(4096 * float(torch.tensor(0.01, dtype=torch.bfloat16)), rel=1e-4)


def test_scores_carry_no_autograd_graph_and_inputs_are_untouched():
    adv = ADV.clone().requires_grad_(True)
    out = AdvantageMagnitudeScorer().score(batch(adv), 0)
    assert not out.requires_grad
    assert torch.equal(adv.detach(), ADV)


def test_batch_of_one_and_length_one():
    out = AdvantageSignedScorer().score(batch(torch.tensor([[-3.0]]), torch.tensor([[1]])), 0)
    assert out.tolist() == [-3.0]


def test_unknown_aggregation_names_the_choices():
    with pytest.raises(ValueError, match="mean, sum, max"):
        AdvantageMagnitudeScorer(agg="median")


def test_declarations_match_what_score_reads():
    for cls in (AdvantageMagnitudeScorer, AdvantageSignedScorer):
        assert set(cls.requires) == {"advantages", "response_mask"}
        assert cls.granularity == "prompt" and not cls.needs_groups
