"""Uniform and non-uniform weights in verl's fit loop on two actor workers (data-parallel ranks, gloo on the CPU).

verl hands each rank its share of the step's batch, and its V1 line first appends
``is_padding`` rows so the batch divides across the ranks. Both lines' loss
divides by the counts of the global mini-batch (verl all-reduces the token
count), so DataFlex normalises its weights over the whole batch, not per rank,
and two ranks train as one would. Per line, one run on two workers with a
scorer that is uniform at step 1 and not at step 2 (``fittest_counting`` with
``uniform_until=1``), against verl without DataFlex on one worker: step 1 must
be the same update, step 2 another one, with weights of mean one over the
global batch. On V1 verl pads each step's 32 rows to 36
(``fit_helpers.TWO_RANK_SETTINGS``). What the actor's loss received is recorded
inside verl's real ``ppo_loss`` on each rank (the harness's loss probe).
"""

from __future__ import annotations

import pytest
import torch
from fit_helpers import LINES_LEGACY_IN_FULL, plain_run, two_rank_run, unit_mean

pytestmark = pytest.mark.fit

#: Rollouts per step (8 prompts x 4 samples) and the rows each line's actor trains on (V1 pads to 36).
ROLLOUTS = 32
TRAINED_ROWS = {"v1": 36, "legacy": 32}


def max_weight_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def concat(calls, name):
    return torch.cat([call[name] for call in calls])


@pytest.mark.parametrize("line", LINES_LEGACY_IN_FULL)
def test_uniform_weights_on_two_ranks_give_verls_update_padding_rows_included(fits, line):
    plain, flex = plain_run(fits, line), two_rank_run(fits, line)
    calls = flex.loss_calls_by_rank(1)
    assert sorted(calls) == [0, 1], "verl's loss did not run on both actor workers"
    # verl's actor trained on every rollout plus the padding rows V1 appended, whose masks are empty
    flat = [call for rank in calls.values() for call in rank]
    mask = concat(flat, "response_mask").bool()
    assert len(mask) == TRAINED_ROWS[line]
    assert int((~mask.any(-1)).sum()) == TRAINED_ROWS[line] - ROLLOUTS
    # DataFlex's all-ones weights reached both ranks' loss; padding rows weigh 0
    weights = concat(flat, "rollout_is_weights")
    assert torch.equal(weights[mask], torch.ones(int(mask.sum())))
    assert torch.all(weights[~mask] == 0)
    assert "rollout_is_weights" not in plain.loss_calls[0]
    assert flex.metric("dataflex/active") == 1.0
    # the same rollouts (generation is keyed per sample), then the update verl makes without DataFlex on one
    # worker: the same up to the order of float sums
    assert flex.metric("critic/score/mean") == plain.metric("critic/score/mean")
    assert flex.metric("response_length/mean") == plain.metric("response_length/mean")
    assert flex.metric("actor/pg_loss") == pytest.approx(plain.metric("actor/pg_loss"), rel=1e-6, abs=1e-9)
    assert flex.metric("actor/grad_norm") == pytest.approx(plain.metric("actor/grad_norm"), rel=1e-6)
    assert max_weight_difference(flex.actor_weights(1), plain.actor_weights(1)) < 1e-6


@pytest.mark.parametrize("line", LINES_LEGACY_IN_FULL)
def test_weights_have_mean_one_over_the_global_batch_not_per_rank(fits, line):
    plain, flex = plain_run(fits, line), two_rank_run(fits, line)
    calls = flex.loss_calls_by_rank(2)
    flat = [call for rank in calls.values() for call in rank]
    weights, mask = concat(flat, "rollout_is_weights"), concat(flat, "response_mask").bool()
    # mean one over the valid tokens of the whole step's batch, both ranks together; padding rows weigh 0
    assert unit_mean(weights, mask, "token") == pytest.approx(1.0, abs=1e-5)
    assert float(weights[mask].std()) > 0.05
    assert torch.all(weights[~mask] == 0)
    assert flex.metric("dataflex/weight/mean", step=2) == pytest.approx(1.0, abs=1e-5)
    # not per rank: each rank's share has its own mean
    per_rank = {
        rank: unit_mean(concat(own, "rollout_is_weights"), concat(own, "response_mask"), "token")
        for rank, own in calls.items()
    }
    assert max(abs(mean - 1.0) for mean in per_rank.values()) > 1e-3, per_rank
    # which is the unit verl's loss divides by: each mini-batch's valid tokens summed over both ranks
    for mini_batch in zip(*calls.values(), strict=True):
        tokens = sum(int(call["response_mask"].sum()) for call in mini_batch)
        assert {call["batch_num_tokens"] for call in mini_batch} == {tokens}
        assert {call["dp_size"] for call in mini_batch} == {2}
    # and the weights changed the update, from the same rollouts as without DataFlex
    assert flex.metric("critic/score/mean", step=2) == plain.metric("critic/score/mean", step=2)
    assert abs(flex.metric("actor/pg_loss", step=2) - plain.metric("actor/pg_loss", step=2)) > 1e-4
    assert abs(flex.metric("actor/grad_norm", step=2) - plain.metric("actor/grad_norm", step=2)) > 1e-4
    assert max_weight_difference(flex.actor_weights(2), plain.actor_weights(2)) > 1e-3
