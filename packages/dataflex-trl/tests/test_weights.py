"""Weights reach TRL's real loss: uniform weights change nothing, non-uniform ones what a hand computation says."""

from __future__ import annotations

import pytest
import torch
from dataflex_trl.mount import LOSS_UNITS
from trl_testkit import BY_REWARD, LOSS_TYPES, NUM_GENERATIONS, UNIFORM, generate, loss_and_grads


@pytest.mark.parametrize("loss_type", list(LOSS_TYPES))
def test_uniform_weights_leave_loss_and_gradients_identical(make_trainer, generation_inputs, loss_type):
    plain = make_trainer(loss_type)
    flex = make_trainer(loss_type, UNIFORM)
    out_plain = generate(plain, generation_inputs)
    out_flex = generate(flex, generation_inputs)
    assert torch.equal(out_plain["completion_ids"], out_flex["completion_ids"])
    assert out_flex["advantages"].shape == out_flex["completion_mask"].shape  # DataFlex wrote per-token advantages
    loss_plain, grads_plain = loss_and_grads(plain, out_plain)
    loss_flex, grads_flex = loss_and_grads(flex, out_flex)
    assert torch.equal(loss_plain, loss_flex), (loss_plain.item(), loss_flex.item())
    assert grads_plain.keys() == grads_flex.keys()
    for name, grad in grads_plain.items():
        assert torch.equal(grad, grads_flex[name]), name
    metrics = flex._metrics["train"]
    assert metrics["dataflex/active"] == [1.0]
    assert metrics["dataflex/weight/std"][0] == pytest.approx(0.0, abs=1e-6)


def _hand_weights(rewards: torch.Tensor, lengths: torch.Tensor, unit: str) -> torch.Tensor:
    """``reward + 0.1`` per completion, scaled to mean one per token or per sequence over completions with tokens."""
    raw = rewards + 0.1
    valid = lengths > 0
    if unit == "token":
        return raw * lengths[valid].sum() / (raw * lengths)[valid].sum()
    return raw * valid.sum() / raw[valid].sum()


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "bnpo", "dr_grpo"])
def test_non_uniform_weights_give_the_hand_computed_loss(make_trainer, generation_inputs, loss_type):
    plain = make_trainer(loss_type)
    flex = make_trainer(loss_type, BY_REWARD)
    out_plain = generate(plain, generation_inputs)
    out_flex = generate(flex, generation_inputs)
    rewards = flex._dataflex_rewards_per_func[:, 0]
    assert rewards.unique().numel() > 1, "the batch needs different rewards for a non-uniform test"
    mask = out_plain["completion_mask"].to(torch.float32)
    lengths = mask.sum(-1)
    weights = _hand_weights(rewards, lengths, LOSS_UNITS[loss_type])
    adv = out_plain["advantages"]
    # first update: the policy is the sampling policy, so the ratio is 1 and no clipping acts
    per_token = -(adv * weights).unsqueeze(1) * mask
    if loss_type == "grpo":
        expected = (per_token.sum(-1) / lengths.clamp(min=1)).mean()
    elif loss_type == "bnpo":
        expected = per_token.sum() / mask.sum()
    elif loss_type == "dr_grpo":
        expected = per_token.sum() / (mask.shape[0] * flex.max_completion_length)
    else:
        expected = per_token.sum() / out_plain["num_items_in_batch"]
    loss = flex._compute_loss(flex.model, out_flex)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5, abs=1e-7)
    assert loss.item() != pytest.approx(plain._compute_loss(plain.model, out_plain).item(), rel=1e-3)


def test_fields_in_the_canonical_vocabulary(make_trainer, generation_inputs):
    """uid groups are TRL's prompt groups; the reward sits on each completion's last token."""
    seen = {}

    from dataflex_core import Scorer, register_scorer

    @register_scorer("trltest_recorder")
    class Recorder(Scorer):
        requires = ["rm_scores", "token_level_scores", "advantages", "old_log_probs", "entropy"]
        needs_groups = True

        def score(self, batch, step_id, **ctx):
            seen["batch"], seen["ctx"], seen["step"] = batch, ctx, step_id
            return torch.ones(len(batch))

    block = {
        "mechanism": "reweight",
        "scorer": {"name": "trltest_recorder"},
        "actuator": {"name": "trltest_proportional"},
    }
    flex = make_trainer("grpo", block)
    out = generate(flex, generation_inputs)
    batch = seen["batch"]
    uid = batch.non_tensor_batch["uid"]
    assert list(uid) == [i // NUM_GENERATIONS for i in range(len(generation_inputs))]
    mask = batch.batch["response_mask"].bool()
    assert torch.equal(mask, out["completion_mask"].bool())
    rewards = flex._dataflex_rewards_per_func[:, 0]
    last = mask.cumsum(-1) == mask.sum(-1, keepdim=True)
    expected = torch.where(mask & last, rewards.unsqueeze(1), torch.zeros(()))
    assert torch.equal(batch.batch["rm_scores"], expected)
    assert torch.equal(batch.batch["token_level_scores"], expected)
    assert batch.batch["entropy"].shape == mask.shape and (batch.batch["entropy"][mask] > 0).all()
    assert (batch.batch["old_log_probs"][mask] < 0).all()
    assert "is_padding" not in batch.batch
    assert set(batch.batch) == {
        "response_mask",
        "rm_scores",
        "token_level_scores",
        "advantages",
        "old_log_probs",
        "entropy",
    }
    assert seen["ctx"] == {"loss_type": "grpo", "adv_estimator": "grpo", "loss_unit": "sequence"}
    assert seen["step"] == 1


def test_invalid_output_stops_the_step_or_leaves_trls_loss_as_it_is(make_trainer, generation_inputs):
    from dataflex_core import InvalidOutputError, Reweighter, register_reweighter

    @register_reweighter("trltest_nan")
    class NaNReweighter(Reweighter):
        def act(self, scores, batch, **ctx):
            return torch.full((len(batch),), float("nan"))

    block = {"mechanism": "reweight", "scorer": {"name": "trltest_reward"}, "actuator": {"name": "trltest_nan"}}
    strict = make_trainer("dapo", block)
    with pytest.raises(InvalidOutputError, match="reweighter trltest_nan .*returned invalid weights at step 1"):
        generate(strict, generation_inputs)
    plain = make_trainer("dapo")
    lenient = make_trainer("dapo", {**block, "on_invalid": "uniform"})
    out_plain, out = generate(plain, generation_inputs), generate(lenient, generation_inputs)
    assert torch.equal(out["advantages"], out_plain["advantages"])  # TRL's own advantages, untouched
    assert lenient._metrics["train"]["dataflex/uniform_fallback"] == [1.0]
    assert lenient._metrics["train"]["dataflex/uniform_fallback_total"] == [1.0]
