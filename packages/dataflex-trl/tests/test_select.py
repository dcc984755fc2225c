"""mechanism select in TRL: soft drops renormalised, hard drops equal to TRL's loss on the kept rows alone."""

from __future__ import annotations

import pytest
import torch
from dataflex_trl.advantages import grpo_advantages
from dataflex_trl.mount import ROW_DENOMINATOR_LOSSES
from trl_testkit import LOSS_TYPES, NUM_GENERATIONS, generate, loss_and_grads

KEEP = 2
#: GFPO keeps the KEEP shortest completions of each group and asks for advantages on them (hard drop).
GFPO = {
    "mechanism": "select",
    "scorer": {"name": "group_reward_variance"},
    "actuator": {"name": "gfpo", "params": {"keep_per_group": KEEP}},
}
#: Half of the completions by reward, advantages as TRL computed them (soft drop).
TOPK = {
    "mechanism": "select",
    "scorer": {"name": "reward_difficulty"},
    "actuator": {"name": "topk_fraction", "params": {"fraction": 0.5}},
}


@pytest.mark.parametrize(
    ("scale_rewards", "aggregation"),
    [("group", "sum_then_normalize"), ("batch", "sum_then_normalize"), ("none", "sum_then_normalize"),
     ("group", "normalize_then_sum")],
)  # fmt: skip
def test_advantage_formula_is_trls(make_trainer, generation_inputs, scale_rewards, aggregation):
    trainer = make_trainer("dapo", scale_rewards=scale_rewards, multi_objective_aggregation=aggregation)
    captured = {}
    original = trainer._calculate_rewards

    def keep(*args):
        captured["rpf"] = original(*args)
        return captured["rpf"]

    trainer._calculate_rewards = keep
    out = generate(trainer, generation_inputs)
    ours = grpo_advantages(
        captured["rpf"], trainer.reward_weights, NUM_GENERATIONS, scale_rewards=scale_rewards, aggregation=aggregation
    )
    assert torch.equal(ours, out["advantages"])


def test_soft_select_zeroes_dropped_rows_and_renormalises(make_trainer, generation_inputs):
    plain = make_trainer("dapo")
    flex = make_trainer("dapo", TOPK)
    out_plain = generate(plain, generation_inputs)
    out = generate(flex, generation_inputs)
    mask = out["completion_mask"].bool()
    assert torch.equal(mask, out_plain["completion_mask"].bool())  # a soft drop keeps TRL's mask
    ratio = torch.where(mask, out["advantages"], torch.zeros(())) / out_plain["advantages"].unsqueeze(1)
    per_row = torch.where(mask, ratio, torch.full_like(ratio, float("nan")))
    nonzero_adv = out_plain["advantages"] != 0
    weights = per_row[nonzero_adv].nanmean(-1)
    kept = weights > 0
    assert 0 < int(kept.sum()) < len(weights)
    lengths = mask.sum(-1).to(torch.float32)[nonzero_adv]
    # mean one per token over the whole batch: the kept rows carry the dropped rows' share
    full_weights = torch.zeros(len(mask))
    full_weights[nonzero_adv] = weights
    rows_kept = full_weights > 0
    expected = mask.sum() / (mask.sum(-1) * rows_kept).sum()
    assert torch.allclose(weights[kept], torch.full_like(weights[kept], float(expected)))
    assert flex._metrics["train"]["dataflex/kept_fraction"] == [pytest.approx(0.5, abs=0.13)]
    assert flex._metrics["train"]["dataflex/advantage_recomputed"] == [0.0]
    assert lengths.numel() > 0


def _kept_only(out: dict, kept: torch.Tensor, advantages: torch.Tensor) -> dict:
    """The generation batch TRL would have built had only the kept completions been sampled."""
    rows = kept.nonzero().flatten()
    sub = {k: v[rows] for k, v in out.items() if isinstance(v, torch.Tensor) and v.dim() >= 1}
    sub["advantages"] = advantages
    sub["num_items_in_batch"] = out["completion_mask"][rows].sum()
    return sub


@pytest.mark.parametrize("loss_type", list(LOSS_TYPES))
def test_hard_drop_equals_trls_loss_on_the_kept_rows(make_trainer, generation_inputs, loss_type):
    plain = make_trainer(loss_type)
    flex = make_trainer(loss_type, GFPO)
    out_plain = generate(plain, generation_inputs)
    out = generate(flex, generation_inputs)
    kept = out["completion_mask"].any(-1)
    assert torch.equal(kept.view(-1, NUM_GENERATIONS).sum(-1), torch.full((len(kept) // NUM_GENERATIONS,), KEEP))
    assert int(out["num_items_in_batch"]) == int(out["completion_mask"].sum())
    rpf = flex._dataflex_rewards_per_func
    # TRL's own formula on a batch of the kept rows alone: groups of KEEP completions
    kept_advantages = grpo_advantages(
        rpf[kept],
        flex.reward_weights,
        KEEP,
        scale_rewards=flex.scale_rewards,
        aggregation=flex.multi_objective_aggregation,
    )
    reference = _kept_only(out_plain, kept, kept_advantages)
    expected, expected_grads = loss_and_grads(flex, reference)
    loss, grads = loss_and_grads(flex, out)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5, abs=1e-7)
    # group advantages sum to zero, so the loss alone can be ~0 whatever the scale: the gradients tell
    assert max(g.abs().max().item() for g in grads.values()) > 1e-6
    # within float32 rounding of the gradient's scale: each gradient sums per-token terms whose advantages cancel
    # within a group, so two batch layouts (the kept rows alone, or among dropped ones) round differently by up to
    # ~5e-4 of the largest entry depending on the CPU's kernels; a wrong weight on any row moves it by far more
    for name, grad in grads.items():
        scale = expected_grads[name].abs().max().item()
        error = (grad - expected_grads[name]).abs().max().item()
        assert error <= 2e-3 * scale + 1e-7, (name, error, scale)
    assert flex._metrics["train"]["dataflex/advantage_recomputed"] == [1.0]
    # the metrics describe the factor TRL's loss really applies: 1 on each kept row where the loss recounts its
    # tokens, rows / kept rows where it divides by a row count the drop leaves as it was
    applied = len(kept) / int(kept.sum()) if loss_type in ROW_DENOMINATOR_LOSSES else 1.0
    assert flex._metrics["train"]["dataflex/weight/max"] == [pytest.approx(applied)]
    assert flex._metrics["train"]["dataflex/hard_drop"] == [1.0]
