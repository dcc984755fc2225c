"""The pilot's screening admission in tensors: rewards summed in float64 and groups mapped back to the requests."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dataflex_core import Batch
from dataflex_core.groups import group_index
from dataflex_core.mechanisms.pilot.stages import screened_prompts, stage_rewards
from dataflex_core.precomputed import STEP_INPUTS_KEY, prepare_batch


def test_stage_rewards_sum_float32_scores_in_float64_over_response_tokens_only():
    g = torch.Generator().manual_seed(3)
    scores = torch.randn(6, 9, generator=g) * 1e3
    mask = torch.rand(6, 9, generator=g) > 0.4
    mask[2] = False  # an empty row
    batch = prepare_batch(Batch({"response_mask": mask.long(), "rm_scores": scores}, {}))
    expected = torch.where(mask, scores.double(), torch.zeros((), dtype=torch.float64)).sum(-1)
    got = stage_rewards(batch)
    assert got.dtype == torch.float64
    assert torch.equal(got, expected)  # bit for bit what a float64 copy of the scores sums to
    assert got[2] == 0


def test_screened_prompts_follows_the_requests_not_the_groups_text_order():
    # uids as a host of object uids hands them: group_index sorts them as text, so "10" comes before "2"
    row_uid = torch.tensor([2, 2, 10, 10, 5, 5])
    index, groups = group_index(np.array([str(u) for u in row_uid.tolist()], dtype=object))
    admitted_by_group = torch.zeros(groups, dtype=torch.bool).scatter_(0, index[2:4], True)  # uid 10's group only
    valid = torch.tensor([True, True, True, False, True, True])
    rewards = torch.tensor([1.0, 0.0, 1.0, 9.0, 1.0, 1.0], dtype=torch.float64)
    asked = torch.tensor([2, 5, 10])
    admitted, mean, std, solved = screened_prompts(asked, admitted_by_group, index, groups, valid, rewards, row_uid)
    assert admitted.tolist() == [False, False, True]
    assert mean.tolist() == [0.5, 1.0, 1.0]  # uid 10's invalid row (reward 9) is out of its mean
    assert std.tolist() == [0.5, 0.0, 0.0]  # the population std, as the reference's np.std
    assert solved.tolist() == [False, True, True]  # every valid pilot succeeded


def test_moving_rows_reads_the_advantages_on_response_tokens_and_follows_an_in_place_change():
    from dataflex_core.compute import compute_counters
    from dataflex_core.precomputed import moving_rows

    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])
    adv = torch.tensor([[0.0, 0.0, 5.0], [2.0, 0.0, 0.0], [3.0, 3.0, 3.0]])  # row 0 moves only off its tokens
    batch = prepare_batch(Batch({"response_mask": mask, "advantages": adv}, {}))
    inputs = batch.meta_info[STEP_INPUTS_KEY]
    assert moving_rows(adv, batch.batch["response_mask"]).tolist() == [False, True, False]
    assert compute_counters(mask, adv)["dataflex/compute/rollouts_wasted"] == 1.0
    assert compute_counters(mask, adv, inputs=inputs)["dataflex/compute/rollouts_wasted"] == 1.0
    adv[0, 0] = 1.0  # a host that edits the advantages in place gets them read again
    assert moving_rows(adv, mask).tolist() == [True, True, False]
    assert compute_counters(mask, adv, inputs=inputs)["dataflex/compute/rollouts_wasted"] == 0.0
    unprepared = mask.clone()
    assert moving_rows(adv, unprepared).tolist() == [True, True, False]


@pytest.mark.parametrize(
    ("success_at", "solved"),
    [(1.0, [False, True, False]), (0.25, [True, True, False]), (0.3, [False, True, False])],
)
def test_a_prompt_is_solved_when_every_pilot_is_a_whole_success_by_the_ledgers_rule(success_at, solved):
    """Fractional rewards count as that fraction of a success (the ledger's rule): pilots of 0.25 each are not a
    prompt solved on every pilot unless ``success_threshold`` says 0.25 succeeds (a reward at the threshold does)."""
    row_uid = torch.tensor([0, 0, 1, 1, 2, 2])
    index, groups = group_index(np.array([str(u) for u in row_uid.tolist()], dtype=object))
    rewards = torch.tensor([0.25, 0.25, 1.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    valid = torch.ones(6, dtype=torch.bool)
    _, _, _, got = screened_prompts(
        torch.tensor([0, 1, 2]), torch.zeros(groups, dtype=torch.bool), index, groups, valid, rewards, row_uid,
        success_at,
    )  # fmt: skip
    assert got.tolist() == solved


def test_a_prompt_whose_pilots_are_all_empty_responses_is_not_solved():
    """No pilot scored (every response empty) is no evidence: such a prompt is not evicted as solved."""
    row_uid = torch.tensor([0, 0, 1, 1])
    index, groups = group_index(np.array([str(u) for u in row_uid.tolist()], dtype=object))
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    valid = torch.tensor([True, True, False, False])
    _, _, _, got = screened_prompts(
        torch.tensor([0, 1]), torch.zeros(groups, dtype=torch.bool), index, groups, valid, rewards, row_uid
    )
    assert got.tolist() == [True, False]
