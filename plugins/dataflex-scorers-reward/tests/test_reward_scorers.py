"""Reward scorers against hand-computed cases and a per-group reference loop."""

import math

import numpy as np
import pytest
import torch
from dataflex_scorers_reward import GroupRewardVarianceScorer, GroupSolveRateScorer, RewardDifficultyScorer

from dataflex_core import Batch, build_from_config
from dataflex_lab.testing import rows_batch


def reward_batch(rewards, lengths, uid=None, is_padding=None, key="rm_scores", L=5, dtype=torch.float32):
    """Rows with ``lengths[i]`` response tokens and reward ``rewards[i]`` on the last one."""
    return rows_batch(lengths, width=L, rewards=rewards, reward_key=key, dtype=dtype, uid=uid, padding=is_padding)


# -- reward_difficulty ---------------------------------------------------------


def test_reward_difficulty_is_the_sequence_reward():
    b = reward_batch([1.0, -0.5, 0.0, 2.0], [3, 5, 0, 1])
    out = RewardDifficultyScorer().score(b, 0)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, torch.tensor([1.0, -0.5, 0.0, 2.0]))


def test_reward_difficulty_sums_a_reward_spread_over_tokens_and_ignores_masked_ones():
    field = torch.tensor([[0.25, 0.25, 0.5, math.nan]])
    b = Batch({"rm_scores": field, "response_mask": torch.tensor([[1, 1, 1, 0]])})
    assert RewardDifficultyScorer().score(b, 0).tolist() == [1.0]


def test_reward_key_selects_the_field_and_is_declared():
    scorer = RewardDifficultyScorer(reward_key="token_level_scores")
    assert scorer.requires == ["token_level_scores", "response_mask"]
    b = reward_batch([0.5, 1.0], [2, 2], key="token_level_scores")
    torch.testing.assert_close(scorer.score(b, 0), torch.tensor([0.5, 1.0]))


def test_missing_reward_field_names_the_fix():
    b = reward_batch([1.0], [2], key="token_level_scores")
    with pytest.raises(KeyError, match="reward_key: token_level_scores"):
        RewardDifficultyScorer().score(b, 0)


def test_reward_key_from_config_reaches_requires():
    from dataflex_core import Registry
    from dataflex_core.registry import LOCAL_PLUGIN

    registry = Registry()
    registry.add("scorer", "reward_difficulty", RewardDifficultyScorer, LOCAL_PLUGIN)
    from dataflex_core import Reweighter

    class Uniform(Reweighter):
        def act(self, scores, batch, **ctx):
            return torch.ones_like(scores)

    registry.add("reweighter", "uniform", Uniform, LOCAL_PLUGIN)
    pipeline = build_from_config(
        {
            "scorer": {"name": "reward_difficulty", "params": {"reward_key": "token_level_scores"}},
            "actuator": "uniform",
        },
        registry=registry,
    )
    assert "token_level_scores" in pipeline.requires and "rm_scores" not in pipeline.requires


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_rewards_give_float32(dtype):
    out = RewardDifficultyScorer().score(reward_batch([1.0, 0.0], [2, 3], dtype=dtype), 0)
    assert out.dtype == torch.float32 and out.tolist() == [1.0, 0.0]


# -- group_solve_rate -------------------------------------------------------------


def test_solve_rate_hand_computed():
    # group a: 2 of 4 succeed; group b: 1 of 2; group c: 0 of 1.
    b = reward_batch([1, 0, 1, 0, 1, 0, 0], [2] * 7, uid=["a", "a", "a", "a", "b", "b", "c"])
    out = GroupSolveRateScorer().score(b, 0)
    torch.testing.assert_close(out, torch.tensor([0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.0]))


def test_solve_rate_threshold_is_strict():
    b = reward_batch([0.5, 0.7, 0.2], [1, 1, 1], uid=["a", "a", "a"])
    out = GroupSolveRateScorer(success_threshold=0.5).score(b, 0)
    torch.testing.assert_close(out, torch.full((3,), 1 / 3))


def test_solve_rate_excludes_padding_and_empty_rows():
    # Row 2 is padding that shares uid "a" and looks successful; row 3 is empty.
    b = reward_batch(
        [1.0, 0.0, 1.0, 1.0, 1.0],
        [2, 2, 2, 0, 2],
        uid=["a", "a", "a", "a", "b"],
        is_padding=[False, False, True, False, False],
    )
    out = GroupSolveRateScorer().score(b, 0)
    torch.testing.assert_close(out, torch.tensor([0.5, 0.5, 0.0, 0.0, 1.0]))


def test_group_scorers_need_uid():
    with pytest.raises(KeyError, match="uid"):
        GroupSolveRateScorer().score(reward_batch([1.0], [1]), 0)


# -- group_reward_variance --------------------------------------------------------


def test_variance_forms_hand_computed():
    # group a: rewards 1,0,0,1 (n=4,k=2); group b: 1,1,0 (n=3,k=2); group c: single row.
    b = reward_batch([1, 0, 0, 1, 1, 1, 0, 1], [1] * 8, uid=list("aaaabbbc"))
    plain = GroupRewardVarianceScorer().score(b, 0)
    torch.testing.assert_close(plain, torch.tensor([0.25] * 4 + [2 / 9] * 3 + [0.0]))
    binary = GroupRewardVarianceScorer(form="binary").score(b, 0)
    torch.testing.assert_close(binary, torch.tensor([4 / 12] * 4 + [2 / 6] * 3 + [0.0]))
    vcrl = GroupRewardVarianceScorer(form="vcrl").score(b, 0)
    torch.testing.assert_close(vcrl, torch.tensor([1.0] * 4 + [1.0] * 3 + [0.0]))


def test_vcrl_is_the_binary_variance_over_its_maximum():
    # n=5: k=1 -> 4/(2*3); k*=2 -> max k(n-k)=6.
    b = reward_batch([1, 0, 0, 0, 0], [1] * 5, uid=["g"] * 5)
    assert GroupRewardVarianceScorer(form="vcrl").score(b, 0)[0].item() == pytest.approx(4 / 6)
    assert GroupRewardVarianceScorer(form="binary").score(b, 0)[0].item() == pytest.approx(4 / 20)


def test_unknown_form_names_the_choices():
    with pytest.raises(ValueError, match="variance, binary, vcrl"):
        GroupRewardVarianceScorer(form="std")


# -- group scorers against a per-group reference loop ----------------------------------


def reference(rewards, valid, uid, threshold, stat):
    out = np.zeros(len(rewards))
    for g in set(uid):
        members = [i for i in range(len(uid)) if uid[i] == g and valid[i]]
        r = np.array([rewards[i] for i in members], dtype=np.float64)
        if stat == "rate":
            value = (r > threshold).mean() if len(r) else 0.0
        elif stat == "variance":
            value = r.var() if len(r) else 0.0
        else:
            n, k = len(r), int((r > threshold).sum())
            if n < 2:
                value = 0.0
            elif stat == "binary":
                value = k * (n - k) / (n * (n - 1))
            else:
                value = k * (n - k) / ((n // 2) * (n - n // 2))
        for i in members:
            out[i] = value
    return out


@pytest.mark.parametrize("stat", ["rate", "variance", "binary", "vcrl"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_group_scorers_match_a_per_group_reference(stat, seed):
    gen = torch.Generator().manual_seed(seed)
    bs = 64
    uid = [f"p{int(g)}" for g in torch.randint(0, 9, (bs,), generator=gen)]
    if stat == "variance":
        rewards = (torch.randn(bs, generator=gen) * 3).tolist()
    else:
        rewards = torch.randint(0, 2, (bs,), generator=gen).float().tolist()
    lengths = torch.randint(0, 6, (bs,), generator=gen).tolist()
    padding = (torch.rand(bs, generator=gen) < 0.15).tolist()
    b = reward_batch(rewards, lengths, uid=uid, is_padding=padding, L=6)
    valid = [n > 0 and not p for n, p in zip(lengths, padding)]
    expected = reference(rewards, valid, uid, 0.0, stat)
    if stat == "rate":
        out = GroupSolveRateScorer().score(b, 0)
    else:
        out = GroupRewardVarianceScorer(form=stat).score(b, 0)
    assert out.shape == (bs,)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_group_scores_follow_their_rows_when_the_batch_is_permuted():
    gen = torch.Generator().manual_seed(5)
    uid = [f"g{i // 4}" for i in range(32)]
    rewards = torch.randint(0, 2, (32,), generator=gen).float().tolist()
    b = reward_batch(rewards, [3] * 32, uid=uid)
    perm = torch.randperm(32, generator=gen)
    scorer = GroupRewardVarianceScorer(form="vcrl")
    torch.testing.assert_close(scorer.score(b.select_rows(perm), 0), scorer.score(b, 0)[perm])


def test_declarations():
    assert not RewardDifficultyScorer.needs_groups
    for cls in (GroupSolveRateScorer, GroupRewardVarianceScorer):
        assert cls.needs_groups and cls.granularity == "prompt"
        assert cls.requires == ["rm_scores", "response_mask"]
