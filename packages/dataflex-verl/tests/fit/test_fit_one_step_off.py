"""DataFlex inside verl 0.9's one-step-off fit loop (``verl/experimental/one_step_off_policy``).

Each run is verl's ``OneStepTaskRunner`` driving ``OneStepOffRayTrainer.fit``
(a coroutine: the next step's rollouts are generated while a step trains) on
the CPU harness: the rollout on a replica of its own (``hybrid_engine=false``)
and weights synced after every step through the lab's CPU checkpoint engine,
loaded by verl's ``rollout.checkpoint_engine.custom_backend_module``. What the
actor's loss received is recorded inside verl's real ``ppo_loss``. Two SGD
steps: the second trains on rollouts of weights one update old.
"""

from __future__ import annotations

import pytest
import torch
from fit_helpers import reweight, unit_mean

from dataflex_lab.verl.cpu_loop.runner import RunSpec

pytestmark = [pytest.mark.fit, pytest.mark.full]

#: Two SGD steps of verl's one-step-off trainer (its config: rollout_correction.bypass_mode, vanilla loss).
ONE_STEP_OFF_SGD = {"entry_point": "one_step_off", "use_v1": False, "steps": 2, "optimizer": "SGD", "lr": 0.5}


def token_mean_pg_loss(call: dict[str, torch.Tensor], weighted: bool) -> float:
    """verl's vanilla policy loss at ratio 1 (the first step: the actor's weights made the rollouts), token-mean."""
    mask = call["response_mask"].double()
    weights = call["rollout_is_weights"].double() if weighted else torch.ones_like(mask)
    return float(-(call["advantages"].double() * weights * mask).sum() / mask.sum())


def test_one_step_off_trains_with_dataflex_weights_and_reports_their_staleness(fits):
    block = reweight("advantage_magnitude", "softmax", {"temperature": 0.5})
    run = fits.run("one_step_off_softmax_sgd", RunSpec(dataflex=block, **ONE_STEP_OFF_SGD))
    assert [r["step"] for r in run.steps] == [1, 2]
    assert run.metric("dataflex/active") == 1.0
    assert len(run.loss_calls) == 2  # one actor update per step, each with DataFlex's weights
    for call in run.loss_calls:
        mask = call["response_mask"].bool()
        assert unit_mean(call["rollout_is_weights"], mask, "token") == pytest.approx(1.0, abs=1e-5)
        assert float(call["rollout_is_weights"][mask].std()) > 0.05
        assert torch.all(call["rollout_is_weights"][~mask] == 0)
    # step 1 is on-policy (ratio 1): verl's pg_loss is the weighted token mean of its advantages, which the
    # uniform weights (the plain run's update) would not give
    first = run.loss_calls[0]
    assert run.metric("actor/pg_loss") == pytest.approx(token_mean_pg_loss(first, weighted=True), abs=1e-5)
    assert abs(token_mean_pg_loss(first, weighted=True) - token_mean_pg_loss(first, weighted=False)) > 1e-3
    # staleness: step 1's rollouts came from the actor's weights, step 2's from weights one update older
    assert run.metric("dataflex/staleness/steps", 1) == 0.0
    assert run.metric("dataflex/staleness/steps", 2) == 1.0
    assert run.metric("dataflex/staleness/max", 2) == 1.0
    assert run.metric("dataflex/staleness/tagged", 2) == 1.0  # from verl's own sync tags on every sample
