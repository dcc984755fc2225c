"""DataFlex inside verl 0.9's legacy fit loop (``trainer.use_v1=false``): ``RayPPOTrainer`` at ``compute_advantage``.

Each run is verl's legacy ``main_ppo_v0.TaskRunner`` driving ``RayPPOTrainer.fit``
on the CPU harness (rollout through verl's plain ``AgentLoopManager``, no
TransferQueue). What the actor's loss received is recorded inside verl's real
``ppo_loss``. SGD, one step, checkpointed, as the V1 equality tests
(``test_fit_loop.py``).
"""

from __future__ import annotations

import pytest
import torch
from fit_helpers import reweight, unit_mean

from dataflex_lab.verl.cpu_loop.runner import RunSpec

pytestmark = pytest.mark.fit

#: One SGD step on the legacy line, checkpointed after it.
LEGACY_SGD = {"use_v1": False, "steps": 1, "optimizer": "SGD", "lr": 0.5, "save_freq": 1}


def legacy_baseline(fits):
    return fits.run("legacy_plain_sgd", RunSpec(**LEGACY_SGD))


def max_weight_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def test_uniform_weights_leave_the_legacy_update_bit_identical(fits):
    base = legacy_baseline(fits)
    flat = fits.run("legacy_constant_sgd", RunSpec(dataflex=reweight("fittest_constant", "softmax"), **LEGACY_SGD))
    assert flat.metric("dataflex/active") == 1.0
    # the same rollouts (keyed generation), then exactly the same update: all-ones weights multiply exactly
    assert flat.metric("critic/score/mean") == base.metric("critic/score/mean")
    assert flat.metric("actor/pg_loss") == base.metric("actor/pg_loss")
    assert flat.metric("actor/grad_norm") == base.metric("actor/grad_norm")
    assert max_weight_difference(flat.actor_weights(1), base.actor_weights(1)) == 0.0
    (call,) = flat.loss_calls  # and DataFlex's weights did reach verl's loss, 1 on every response token
    mask = call["response_mask"].bool()
    assert torch.equal(call["rollout_is_weights"][mask], torch.ones(int(mask.sum())))
    assert "rollout_is_weights" not in base.loss_calls[0]


def test_nonuniform_weights_change_the_legacy_update_with_mean_one_in_the_loss(fits):
    base = legacy_baseline(fits)
    block = reweight("advantage_magnitude", "softmax", {"temperature": 0.5})
    run = fits.run("legacy_softmax_sgd", RunSpec(dataflex=block, **LEGACY_SGD))
    assert run.metric("critic/score/mean") == base.metric("critic/score/mean")  # same rollouts ...
    assert abs(run.metric("actor/pg_loss") - base.metric("actor/pg_loss")) > 1e-4  # ... another update
    assert max_weight_difference(run.actor_weights(1), base.actor_weights(1)) > 1e-3
    weights = torch.cat([call["rollout_is_weights"] for call in run.loss_calls])
    mask = torch.cat([call["response_mask"] for call in run.loss_calls]).bool()
    assert unit_mean(weights, mask, "token") == pytest.approx(1.0, abs=1e-5)
    assert float(weights[mask].std()) > 0.05
    assert torch.all(weights[~mask] == 0)
    assert run.metric("dataflex/weight/mean") == pytest.approx(1.0, abs=1e-5)
