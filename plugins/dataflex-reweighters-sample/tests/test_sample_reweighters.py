"""Per-sample reweighters: hand-computed formulas, then the contract every one of them keeps."""

import math

import pytest
import torch
from dataflex_reweighters_sample import (
    DifficultyBandReweighter,
    FocalReweighter,
    GrpoLeadReweighter,
    PerAdvantageReweighter,
    PositiveDownweightReweighter,
    SoftmaxReweighter,
)

from dataflex_lab.testing import rows_batch


def make_batch(bs, L=4, lengths=None, is_padding=None, uid=None, adv_sign=None):
    """``bs`` rows; row i has ``lengths[i]`` response tokens and advantage ``adv_sign[i]`` on them."""
    return rows_batch(
        [L] * bs if lengths is None else lengths,
        width=L,
        advantages=[1.0] * bs if adv_sign is None else adv_sign,
        uid=[f"g{i}" for i in range(bs)] if uid is None else uid,
        padding=is_padding,
    )


def tensor(values):
    return torch.tensor(values, dtype=torch.float32)


# -- hand-computed formulas ------------------------------------------------------------


def test_softmax_hand_computed():
    w = SoftmaxReweighter().act(tensor([0.0, math.log(2), math.log(4)]), make_batch(3))
    torch.testing.assert_close(w, tensor([3 / 7, 6 / 7, 12 / 7]))
    w = SoftmaxReweighter(temperature=2.0).act(tensor([0.0, math.log(4)]), make_batch(2))
    torch.testing.assert_close(w, tensor([2 / 3, 4 / 3]))


@pytest.mark.parametrize("scale", [1e6, 1e-6])
def test_softmax_is_stable_for_huge_and_tiny_scores(scale):
    s = tensor([0.0, 1.0, 2.0]) * scale
    w = SoftmaxReweighter(temperature=scale).act(s, make_batch(3))
    expected = torch.exp(tensor([0.0, 1.0, 2.0]))
    torch.testing.assert_close(w, expected * 3 / expected.sum())
    w = SoftmaxReweighter().act(tensor([-1.0, 1.0, 1.0]) * 1e30, make_batch(3))
    torch.testing.assert_close(w, tensor([0.0, 1.5, 1.5]))


def test_per_advantage_hand_computed():
    w = PerAdvantageReweighter(alpha=0.5, epsilon=0.0).act(tensor([1.0, -4.0, 0.0]), make_batch(3))
    torch.testing.assert_close(w, tensor([1.0, 2.0, 0.0]))
    # epsilon is relative to the batch maximum: bases 0.25+0.5, 1+0.5, 0+0.5.
    w = PerAdvantageReweighter(alpha=1.0, epsilon=0.5).act(tensor([1.0, 4.0, 0.0]), make_batch(3))
    torch.testing.assert_close(w, tensor([0.75, 1.5, 0.5]) * 3 / 2.75)


@pytest.mark.parametrize("scale", [1e6, 1e-6, 1e30])
def test_per_advantage_is_scale_free(scale):
    s = tensor([0.5, 2.0, 1.0, 0.0])
    reweighter = PerAdvantageReweighter(alpha=3.0)
    torch.testing.assert_close(reweighter.act(s * scale, make_batch(4)), reweighter.act(s, make_batch(4)))


def test_difficulty_band_hand_computed():
    w = DifficultyBandReweighter().act(tensor([0.0, 0.25, 0.5, 1.0]), make_batch(4))
    torch.testing.assert_close(w, tensor([0.1, 1.0, 1.0, 0.1]) * 4 / 2.2)


def test_difficulty_band_bands_binary_rewards_on_their_group_solve_rate():
    # Per-sample 0/1 rewards (reward_difficulty on a binary verifier); groups of 4.
    rewards = [1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0]
    uid = [f"p{i // 4}" for i in range(16)]
    w = DifficultyBandReweighter(outside_weight=0.0).act(tensor(rewards), make_batch(16, uid=uid))
    # Solve rates 1, 0.25, 0.5, 0: only the two middle groups are in [0.2, 0.8].
    torch.testing.assert_close(w, tensor([0.0] * 4 + [2.0] * 8 + [0.0] * 4))


def test_difficulty_band_with_nothing_in_band_is_uniform():
    w = DifficultyBandReweighter(outside_weight=0.0).act(tensor([0.0, 1.0, 1.0]), make_batch(3))
    torch.testing.assert_close(w, torch.ones(3))


def grpo_lead_weight(p, lo=0.5, hi=1.5, k=10.0, mid=0.5):
    return lo + (hi - lo) / (1 + math.exp(k * (p - mid)))


def test_grpo_lead_hand_computed():
    p = [0.25, 0.25, 0.75, 0.75, 0.5]
    sign = [1, -1, 1, -1, 0]
    w = GrpoLeadReweighter().act(tensor(p), make_batch(5, uid=list("aabbc"), adv_sign=sign))
    raw = tensor([grpo_lead_weight(0.25), grpo_lead_weight(0.75), grpo_lead_weight(0.75), grpo_lead_weight(0.25), 1])
    torch.testing.assert_close(w, raw * 5 / raw.sum())
    # A correct answer to a hard prompt outweighs one to an easy prompt.
    assert w[0] > w[2]


def test_grpo_lead_extreme_steepness_stays_finite():
    w = GrpoLeadReweighter(steepness=1e9).act(tensor([0.0, 1.0]), make_batch(2, uid=["a", "b"]))
    torch.testing.assert_close(w, tensor([1.5, 0.5]) * 2 / 2.0)


def test_focal_hand_computed():
    w = FocalReweighter(gamma=2.0).act(tensor([0.0, 0.5, 1.0]), make_batch(3))
    torch.testing.assert_close(w, tensor([1.0, 0.25, 0.0]) * 3 / 1.25)


def test_focal_on_an_all_solved_batch_is_uniform():
    torch.testing.assert_close(FocalReweighter().act(torch.ones(4), make_batch(4)), torch.ones(4))


def test_positive_downweight_hand_computed():
    w = PositiveDownweightReweighter(positive_weight=0.2).act(torch.zeros(4), make_batch(4, adv_sign=[1, -1, 0, 1]))
    torch.testing.assert_close(w, tensor([0.2, 1.0, 1.0, 0.2]) * 4 / 2.4)


@pytest.mark.parametrize("cls", [DifficultyBandReweighter, GrpoLeadReweighter, FocalReweighter])
@pytest.mark.parametrize("bad", [[-1.0, 1.0], [0.5, 2.0], [1e6, 0.0]])
def test_solve_rate_reweighters_reject_scores_outside_the_unit_interval(cls, bad):
    with pytest.raises(ValueError, match="pair it with group_solve_rate"):
        cls().act(tensor(bad), make_batch(2))


@pytest.mark.parametrize("cls", [DifficultyBandReweighter, GrpoLeadReweighter, FocalReweighter])
def test_solve_rate_reweighters_need_uid(cls):
    b = make_batch(2)
    del b.non_tensor_batch["uid"]
    with pytest.raises(KeyError, match="uid"):
        cls().act(tensor([0.5, 0.5]), b)


@pytest.mark.parametrize(
    ("cls", "params"),
    [
        (SoftmaxReweighter, {"temperature": 0.0}),
        (PerAdvantageReweighter, {"alpha": -1.0}),
        (DifficultyBandReweighter, {"low": 0.9, "high": 0.1}),
        (GrpoLeadReweighter, {"min_weight": -0.1}),
        (FocalReweighter, {"gamma": -2.0}),
        (PositiveDownweightReweighter, {"positive_weight": -0.5}),
    ],
)
def test_bad_params_are_rejected_with_the_value(cls, params):
    with pytest.raises(ValueError, match=str(next(iter(params.values())))):
        cls(**params)


# -- the contract, for every reweighter ---------------------------------------------

ALL = [
    SoftmaxReweighter(),
    SoftmaxReweighter(temperature=0.01),
    PerAdvantageReweighter(),
    DifficultyBandReweighter(),
    GrpoLeadReweighter(),
    FocalReweighter(gamma=2.0),
    PositiveDownweightReweighter(),
]
IDS = [r.describe() for r in ALL]
UNIT = (DifficultyBandReweighter, GrpoLeadReweighter, FocalReweighter)


def random_case(reweighter, seed, bs=24, group=4):
    gen = torch.Generator().manual_seed(seed)
    uid = [f"p{i // group}" for i in range(bs)]
    if isinstance(reweighter, UNIT):
        per_group = torch.randint(0, group + 1, (bs // group,), generator=gen).float() / group
        scores = per_group.repeat_interleave(group)
    else:
        scores = torch.randn(bs, generator=gen) * 3
    lengths = torch.randint(0, 5, (bs,), generator=gen).tolist()
    padding = (torch.rand(bs, generator=gen) < 0.2).tolist()
    sign = torch.randint(-1, 2, (bs,), generator=gen).tolist()
    return scores, make_batch(bs, lengths=lengths, is_padding=padding, uid=uid, adv_sign=sign)


def valid_rows(batch):
    return batch.batch["response_mask"].bool().any(-1) & ~batch.batch["is_padding"]


@pytest.mark.parametrize("reweighter", ALL, ids=IDS)
@pytest.mark.parametrize("seed", range(4))
def test_weights_are_float32_nonnegative_finite_mean_one_and_zero_on_invalid_rows(reweighter, seed):
    scores, batch = random_case(reweighter, seed)
    w = reweighter.act(scores, batch)
    valid = valid_rows(batch)
    assert w.shape == scores.shape and w.dtype == torch.float32
    assert torch.isfinite(w).all() and (w >= 0).all()
    assert (w[~valid] == 0).all()
    assert w[valid].mean().item() == pytest.approx(1.0, rel=1e-5)


@pytest.mark.parametrize("reweighter", ALL, ids=IDS)
def test_padding_rows_do_not_change_the_other_weights(reweighter):
    scores, batch = random_case(reweighter, 7)
    w = reweighter.act(scores, batch)
    junk = scores.clone()
    pad = batch.batch["is_padding"]
    junk[pad] = 1.0 if isinstance(reweighter, UNIT) else 1e4
    torch.testing.assert_close(reweighter.act(junk, batch), w)


CONSTANTS = [0.0, 0.5, 1.0, -3.0, 1e6, 1e-6]


@pytest.mark.parametrize(
    ("reweighter", "value"),
    # Solve-rate reweighters only take scores in [0, 1] (tested above).
    [(r, v) for r in ALL for v in CONSTANTS if not isinstance(r, UNIT) or 0 <= v <= 1],
    ids=[f"{r.describe()}-{v}" for r in ALL for v in CONSTANTS if not isinstance(r, UNIT) or 0 <= v <= 1],
)
def test_constant_scores_give_uniform_weights(reweighter, value):
    batch = make_batch(6, uid=list("aabbcc"))  # all advantages positive: one sign
    w = reweighter.act(torch.full((6,), value), batch)
    torch.testing.assert_close(w, torch.ones(6))


@pytest.mark.parametrize("reweighter", ALL, ids=IDS)
def test_batch_of_one(reweighter):
    assert reweighter.act(tensor([0.5]), make_batch(1)).tolist() == [1.0]


@pytest.mark.parametrize("reweighter", ALL, ids=IDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_any_float_scores_give_float32_weights(reweighter, dtype):
    scores, batch = random_case(reweighter, 3)
    w = reweighter.act(scores.to(dtype), batch)
    assert w.dtype == torch.float32
    torch.testing.assert_close(w, reweighter.act(scores.to(dtype).float(), batch))


@pytest.mark.parametrize("reweighter", ALL, ids=IDS)
def test_ties_get_equal_weights(reweighter):
    scores = tensor([0.25, 0.25, 0.75, 0.75])
    batch = make_batch(4, uid=list("aabb"))
    w = reweighter.act(scores, batch)
    assert w[0] == w[1] and w[2] == w[3]


@pytest.mark.parametrize("reweighter", ALL, ids=IDS)
def test_non_finite_scores_on_valid_rows_are_refused(reweighter):
    with pytest.raises(ValueError, match="non-finite"):
        reweighter.act(tensor([0.5, math.nan]), make_batch(2))


@pytest.mark.parametrize("reweighter", ALL, ids=IDS)
def test_token_shaped_scores_are_refused(reweighter):
    with pytest.raises(ValueError, match="per-sample scores"):
        reweighter.act(torch.ones(2, 4), make_batch(2))


def test_declarations():
    for r in ALL:
        assert type(r).accepts_granularity == ("prompt", "response")
    assert GrpoLeadReweighter.requires == PositiveDownweightReweighter.requires == ["advantages", "response_mask"]
    assert all(cls.needs_groups for cls in UNIT)
    assert not SoftmaxReweighter.needs_groups and not PerAdvantageReweighter.needs_groups
