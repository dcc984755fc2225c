"""gfpo, max_variance and the subset advantage, against hand cases and per-group reference loops."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from dataflex_selectors import (
    GFPOSelector,
    MaxVarianceSelector,
    group_advantage_on_subset,
    token_efficiency,
    wants_recomputed_advantage,
)

from dataflex_lab.testing import grpo_batch


def random_group_batch(seed, groups=7, size=6, binary=False):
    """A GRPO step as verl hands it over (groups interleaved, empty responses, a singleton group, verl's padding
    rows) and a reward per row: its 0/1 reward, or integers in [-3, 3] with many ties."""
    batch = grpo_batch(groups, size, width=8, min_length=0, singleton_groups=1, padding_rows=3, shuffle=True, seed=seed)
    if binary:
        return batch, batch.batch["rm_scores"].sum(-1)
    gen = torch.Generator().manual_seed(seed)
    return batch, torch.randint(-3, 4, (len(batch),), generator=gen).float()


def valid_rows_by_group(batch):
    mask = batch.batch["response_mask"].bool().any(-1) & ~batch.batch["is_padding"]
    groups: dict[str, list[int]] = {}
    for row, uid in enumerate(batch.non_tensor_batch["uid"]):
        if mask[row]:
            groups.setdefault(uid, []).append(row)
    return groups


# ---------------------------------------------------------------- gfpo


def test_gfpo_length_keeps_the_k_shortest_per_group(batch_factory):
    lengths = [5, 2, 8, 3, 1, 7, 4, 4]
    batch = batch_factory(lengths, uid=["a"] * 4 + ["b"] * 4)
    keep = GFPOSelector(keep_per_group=2, metric="length").act(torch.zeros(8), batch)
    assert keep.tolist() == [False, True, False, True, True, False, True, False]


def test_gfpo_length_ties_prefer_higher_reward(batch_factory):
    batch = batch_factory([3, 3, 3], uid=["a", "a", "a"])
    keep = GFPOSelector(keep_per_group=1, metric="length").act(torch.tensor([0.0, 1.0, 0.5]), batch)
    assert keep.tolist() == [False, True, False]


def test_gfpo_efficiency_hand_case(batch_factory):
    # rewards / lengths: 1/2=0.5, 1/4=0.25, 0 and -1*3=-3 -> keep rows 0 and 1.
    batch = batch_factory([2, 4, 1, 3], uid=["a"] * 4)
    keep = GFPOSelector(keep_per_group=2, metric="reward_per_length").act(torch.tensor([1.0, 1.0, 0.0, -1.0]), batch)
    assert keep.tolist() == [True, True, False, False]


def test_gfpo_efficiency_prefers_the_shorter_response_when_rewards_are_negative(batch_factory):
    # Plain r/len would rank the 100-token failure (-0.01) above the 10-token one (-0.1).
    batch = batch_factory([100, 10], uid=["a", "a"])
    keep = GFPOSelector(keep_per_group=1, metric="reward_per_length").act(torch.tensor([-1.0, -1.0]), batch)
    assert keep.tolist() == [False, True]


def test_token_efficiency_is_monotone_in_reward_and_length():
    reward = torch.tensor([-2.0, -1.0, 0.0, 1.0, 2.0], dtype=torch.float64)
    for length in (1, 5, 50):
        eff = token_efficiency(reward, torch.full((5,), length))
        assert torch.all(eff[1:] >= eff[:-1])
    for r in (-1.0, 1.0):
        eff = token_efficiency(torch.full((3,), r, dtype=torch.float64), torch.tensor([1, 5, 50]))
        assert torch.all(eff[1:] < eff[:-1])


@pytest.mark.parametrize("metric", ["length", "reward_per_length"])
@pytest.mark.parametrize("seed", range(4))
def test_gfpo_matches_a_per_group_reference(metric, seed):
    batch, reward = random_group_batch(seed)
    k = 3
    keep = GFPOSelector(keep_per_group=k, metric=metric).act(reward, batch)
    lengths = batch.batch["response_mask"].sum(-1)
    expected = torch.zeros_like(keep)
    for rows in valid_rows_by_group(batch).values():
        if metric == "length":
            ordered = sorted(rows, key=lambda i: (int(lengths[i]), -float(reward[i]), i))
        else:
            eff = {
                i: (float(reward[i]) / int(lengths[i]) if reward[i] >= 0 else float(reward[i]) * int(lengths[i]))
                for i in rows
            }
            ordered = sorted(rows, key=lambda i: (-eff[i], i))
        expected[ordered[:k]] = True
    assert keep.tolist() == expected.tolist()


def test_gfpo_needs_groups_and_says_so(batch_factory):
    assert GFPOSelector.needs_groups
    with pytest.raises(KeyError, match="uid"):
        GFPOSelector().act(torch.zeros(2), batch_factory([1, 1]))


@pytest.mark.parametrize("bad", [{"keep_per_group": 0}, {"keep_per_group": 2.5}, {"metric": "tokens"}])
def test_gfpo_rejects_bad_params(bad):
    with pytest.raises(ValueError, match="gfpo"):
        GFPOSelector(**bad)


# ---------------------------------------------------------------- max_variance


def test_max_variance_hand_case(batch_factory):
    # Group a: rewards 0,1,0,1,0,1 -> m=4: two low + two high (variance 0.25); among
    # equal rewards the low end takes the first rows (0, 2), the high end the last (3, 5).
    # Group b: 5,1,3,2 -> sorted 1,2,3,5; m=2 -> {1, 5}.
    batch = batch_factory([1] * 10, uid=["a"] * 6 + ["b"] * 4)
    reward = torch.tensor([0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 5.0, 1.0, 3.0, 2.0])
    keep_a = MaxVarianceSelector(keep_per_group=4).act(reward, batch)[:6]
    assert keep_a.tolist() == [True, False, True, True, False, True]
    keep_b = MaxVarianceSelector(keep_per_group=2).act(reward, batch)[6:]
    assert keep_b.tolist() == [True, True, False, False]


def test_max_variance_tie_takes_fewer_top_rewards(batch_factory):
    # 0,0,1,1 with m=3: {0,0,1} and {0,1,1} tie; the one with fewer top rewards wins.
    batch = batch_factory([1] * 4, uid=["a"] * 4)
    keep = MaxVarianceSelector(keep_per_group=3).act(torch.tensor([0.0, 1.0, 0.0, 1.0]), batch)
    assert keep.tolist() == [True, True, True, False]


def test_max_variance_small_groups_keep_every_valid_row(batch_factory):
    batch = batch_factory([1, 1, 0, 1], uid=["a", "a", "a", "b"], padding=[False, False, False, False])
    keep = MaxVarianceSelector(keep_per_group=4).act(torch.tensor([1.0, 2.0, 3.0, 4.0]), batch)
    assert keep.tolist() == [True, True, False, True]


def test_max_variance_large_rewards_stay_exact(batch_factory):
    batch = batch_factory([1] * 4, uid=["a"] * 4)
    reward = torch.tensor([1e12, 1e12 + 1, 1e12 + 2, 1e12 + 8], dtype=torch.float64)
    keep = MaxVarianceSelector(keep_per_group=2).act(reward, batch)
    assert keep.tolist() == [True, False, False, True]


@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_max_variance_matches_brute_force_per_group(seed, binary):
    batch, reward = random_group_batch(seed, binary=binary)
    m = 3
    keep = MaxVarianceSelector(keep_per_group=m).act(reward, batch)
    padding = batch.batch["is_padding"]
    assert not keep[padding].any()
    groups = valid_rows_by_group(batch)
    kept_rows = set(keep.nonzero().flatten().tolist())
    assert kept_rows == {r for rows in groups.values() for r in rows} & kept_rows
    for rows in groups.values():
        kept = [r for r in rows if r in kept_rows]
        if len(rows) <= m:
            assert kept == rows
            continue
        assert len(kept) == m
        best = max(float(np.var([float(reward[r]) for r in c])) for c in itertools.combinations(rows, m))
        assert float(np.var([float(reward[r]) for r in kept])) == pytest.approx(best, abs=1e-12)


# ---------------------------------------------------------------- subset advantage


def test_recompute_flag_defaults():
    assert wants_recomputed_advantage(GFPOSelector())
    assert wants_recomputed_advantage(MaxVarianceSelector())
    assert not wants_recomputed_advantage(MaxVarianceSelector(recompute_advantage=False))
    assert not wants_recomputed_advantage(object())


def test_group_advantage_on_subset_hand_case():
    # Group a keeps rewards 1 and 3 (mean 2, unbiased std sqrt(2)); row 2 is dropped.
    # Group b keeps one row: mean 0, std 1 -> advantage = reward / (1 + eps).
    reward = torch.tensor([1.0, 3.0, 100.0, 4.0])
    kept = torch.tensor([True, True, False, True])
    adv = group_advantage_on_subset(reward, np.array(["a", "a", "a", "b"], dtype=object), kept, epsilon=0.0)
    s = 2**0.5
    assert adv.tolist() == pytest.approx([-1 / s, 1 / s, 0.0, 4.0])
    centred = group_advantage_on_subset(reward, ["a", "a", "a", "b"], kept, norm_by_std=False)
    assert centred.tolist() == pytest.approx([-1.0, 1.0, 0.0, 4.0])


@pytest.mark.parametrize("seed", range(3))
def test_group_advantage_on_subset_matches_a_per_group_loop(seed):
    batch, reward = random_group_batch(seed, binary=seed == 0)
    kept = MaxVarianceSelector(keep_per_group=3).act(reward, batch)
    adv = group_advantage_on_subset(reward, batch.non_tensor_batch["uid"], kept)
    expected = torch.zeros_like(adv)
    uid = batch.non_tensor_batch["uid"]
    for g in set(uid.tolist()):
        rows = [i for i in range(len(uid)) if uid[i] == g and kept[i]]
        if not rows:
            continue
        scores = reward[rows]
        mean, std = (torch.tensor(0.0), torch.tensor(1.0)) if len(rows) == 1 else (scores.mean(), scores.std())
        expected[rows] = (scores - mean) / (std + 1e-6)
    torch.testing.assert_close(adv, expected)
