"""token_prob and token_entropy against hand-computed cases."""

import math

import pytest
import torch
from dataflex_scorers_policy import TokenEntropyScorer, TokenProbScorer

from dataflex_core import Batch

MASK = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 1, 1]])


def test_token_prob_is_exp_of_old_log_probs_on_response_tokens():
    lp = torch.log(torch.tensor([[0.5, 0.25, 0.9], [0.3, 0.3, 0.3], [1.0, 0.1, 0.02]]))
    out = TokenProbScorer().score(Batch({"old_log_probs": lp, "response_mask": MASK}), 0)
    assert out.shape == (3, 3) and out.dtype == torch.float32
    torch.testing.assert_close(out, torch.tensor([[0.5, 0.25, 0.0], [0.0, 0.0, 0.0], [1.0, 0.1, 0.02]]))


def test_token_entropy_is_the_entropy_field_on_response_tokens():
    ent = torch.tensor([[0.7, 2.0, 5.0], [1.0, 1.0, 1.0], [0.0, 0.1, 3.5]])
    out = TokenEntropyScorer().score(Batch({"entropy": ent, "response_mask": MASK}), 0)
    torch.testing.assert_close(out, torch.tensor([[0.7, 2.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.1, 3.5]]))


@pytest.mark.parametrize(("cls", "field"), [(TokenProbScorer, "old_log_probs"), (TokenEntropyScorer, "entropy")])
def test_masked_positions_are_zero_even_when_they_hold_nan_or_inf(cls, field):
    values = torch.full((3, 3), -0.5)
    values[MASK == 0] = math.nan
    values[1, 0] = math.inf
    out = cls().score(Batch({field: values, "response_mask": MASK}), 0)
    assert torch.isfinite(out).all()
    assert (out[MASK == 0] == 0).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_inputs_give_float32(dtype):
    lp = torch.full((2, 3), -1.0, dtype=dtype)
    out = TokenProbScorer().score(Batch({"old_log_probs": lp, "response_mask": MASK[:2]}), 0)
    assert out.dtype == torch.float32
    assert out[0, 0].item() == pytest.approx(math.exp(-1.0), rel=1e-6)
    ent = TokenEntropyScorer().score(Batch({"entropy": lp.abs(), "response_mask": MASK[:2]}), 0)
    assert ent.dtype == torch.float32


def test_inputs_are_not_modified_and_no_graph_is_kept():
    lp = torch.full((3, 3), -0.1, requires_grad=True)
    out = TokenProbScorer().score(Batch({"old_log_probs": lp, "response_mask": MASK}), 0)
    assert not out.requires_grad and out.data_ptr() != lp.data_ptr()
    assert (lp.detach() == -0.1).all()
    ent = torch.ones(3, 3)
    out = TokenEntropyScorer().score(Batch({"entropy": ent, "response_mask": torch.ones(3, 3)}), 0)
    out += 1
    assert (ent == 1).all(), "the score must be a new tensor, not a view of the batch field"


def test_declarations():
    assert TokenProbScorer.requires == ["old_log_probs", "response_mask"]
    assert TokenEntropyScorer.requires == ["entropy", "response_mask"]
    for cls in (TokenProbScorer, TokenEntropyScorer):
        assert cls.granularity == "token" and not cls.needs_groups


def test_scores_over_many_numpy_chunks_match_torchs_formula():
    """On the CPU the scores are written chunk by chunk in numpy: the entropy is the field bit for bit, the
    probability numpy's float32 exp, within 2 ulp of torch's, and 0 outside the response across chunk edges."""
    gen = torch.Generator().manual_seed(3)
    bs, length = 300, 2000  # 600k tokens: three chunks, edges inside rows
    lengths = torch.randint(0, length + 1, (bs,), generator=gen)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
    lp = -torch.rand(bs, length, generator=gen) * 12
    lp[mask == 0] = math.nan
    ent = torch.rand(bs, length, generator=gen) * 5
    batch = Batch({"old_log_probs": lp, "entropy": ent, "response_mask": mask})
    on = mask.bool()
    probs = TokenProbScorer().score(batch, 0)
    expected = torch.where(on, lp.exp(), torch.zeros(()))
    torch.testing.assert_close(probs, expected, rtol=2.4e-7, atol=0.0)
    assert (probs[~on] == 0).all() and probs.data_ptr() != lp.data_ptr()
    entropy = TokenEntropyScorer().score(batch, 0)
    assert torch.equal(entropy, torch.where(on, ent, torch.zeros(())))
    assert entropy.data_ptr() != ent.data_ptr()
