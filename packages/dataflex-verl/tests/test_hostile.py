"""verl's real ``_compute_advantage`` and a real TransferQueue against the hostile-plugin suite.

The suite (the testing kit's ``hostile_suite.HostileStepSuite``) is the one TRL's tests run too: each
hostile pipeline goes through the trainer ``get_trainer_cls("dataflex_sync")``
builds from verl's real config, on a synthetic rollout in verl's layout put
into the queue; what reached the actor is read back from the queue and fed to
verl's real ``ppo_loss``. A step with no valid token is one verl trains
through: every response masked out, or every row verl's padding.
"""

from __future__ import annotations

import pytest
import torch
import transfer_queue as tq

from dataflex_core import Reweighter, register_reweighter
from dataflex_core.lock import lock_environment, write_lock
from dataflex_lab.testing import hostile_suite, plugin_sites
from dataflex_lab.testing.hostile import HOSTILE
from dataflex_lab.testing.plugin_sites import forget_installed_plugins
from dataflex_lab.verl import sandbox

pytestmark = pytest.mark.verl


def trainer_for(make_config, block, overrides=()):
    from verl.trainer.ppo.v1 import get_trainer_cls

    trainer = get_trainer_cls("dataflex_sync")(make_config(overrides, dataflex=block))
    trainer.global_steps = 1
    return trainer


def padded(meta, *fields):
    data = tq.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id, select_fields=list(fields))
    return {name: data[name].to_padded_tensor(0) for name in fields if name in data.keys()}


def observe_results(trainer, monkeypatch) -> list:
    """The session's StepResults as the host receives them (the host writes what they hold)."""
    results = []
    run = trainer.dataflex.run

    def spy(*args, **kwargs):
        results.append(run(*args, **kwargs))
        return results[-1]

    monkeypatch.setattr(trainer.dataflex, "run", spy)
    return results


class VerlHostile(hostile_suite.HostileHarness):
    """A hostile block through verl's ``_compute_advantage``; what reached the actor fed to verl's ``ppo_loss``."""

    def __init__(self, make_config, monkeypatch) -> None:
        self.make_config, self.monkeypatch = make_config, monkeypatch

    def outcome(self, block):
        trainer = trainer_for(self.make_config, block)
        results = observe_results(trainer, self.monkeypatch)
        meta = sandbox.put_rollout(sandbox.synthetic_rollout(num_prompts=4, n=4, padding_rows=2))
        before = padded(meta, "old_log_probs", "response_mask")
        metrics: dict = {}
        try:
            out, error = trainer._compute_advantage(meta, metrics), None
        except Exception as exc:  # noqa: BLE001 - the suite checks what it is
            out, error = meta, exc
        after = padded(meta, "old_log_probs", "response_mask")
        unchanged = all(torch.equal(before[name], after[name]) for name in before)
        if error is not None:
            assert "rollout_is_weights" not in padded(meta, "rollout_is_weights")  # nothing reached the actor
            sandbox.clear(meta)
            return hostile_suite.StepOutcome(error, {}, False, unchanged, False)
        ones = torch.ones_like(after["response_mask"], dtype=torch.float32)
        loss = sandbox.actor_loss(out, trainer.config)
        plain = sandbox.actor_loss(out, trainer.config, weights=ones)
        applied = results[-1].applied
        sandbox.clear(meta)
        return hostile_suite.StepOutcome(
            error,
            {k: v for k, v in metrics.items() if k.startswith("dataflex/")},
            framework_loss=torch.allclose(loss, plain, rtol=1e-6, atol=0.0),
            framework_tensors_unchanged=unchanged,
            weights_have_graph=applied is not None and (applied.requires_grad or applied.grad_fn is not None),
        )


class TestVerlAgainstHostilePlugins(hostile_suite.HostileStepSuite):
    @pytest.fixture
    def hostile(self, make_config, queue, monkeypatch):
        return VerlHostile(make_config, monkeypatch)


# -- a step with no valid token ------------------------------------------------------------------

CALLED: list[int] = []


@register_reweighter("hostiletest_counting")
class CountingReweighter(Reweighter):
    """Uniform weights, counting its calls: on a step with no valid token it must not be called."""

    def act(self, scores, batch, **ctx):
        CALLED.append(ctx["step_id"])
        return torch.ones(len(batch))


def masked_out(rollout):
    """The rollout with every response token masked out of the loss (``response_mask`` 0 on every row)."""
    mask = rollout.fields["response_mask"]
    rollout.fields["response_mask"] = torch.nested.nested_tensor_from_jagged(
        torch.zeros_like(mask.values()), offsets=mask.offsets()
    )
    return rollout


# without rollout log-probs: verl's rollout correction itself refuses a mask without a valid token
@pytest.mark.parametrize(
    "rollout",
    [lambda: masked_out(sandbox.synthetic_rollout(num_prompts=4, n=4, padding_rows=2, rollout_log_probs=False)),
     lambda: sandbox.synthetic_rollout(num_prompts=0, n=4, padding_rows=8, rollout_log_probs=False)],
    ids=["every-response-masked", "every-row-padding"],
)  # fmt: skip
def test_a_step_without_a_valid_token_is_verls_own_step_counted(make_config, queue, rollout):
    block = {"scorer": {"name": "advantage_magnitude"}, "actuator": {"name": "hostiletest_counting"}}
    trainer = trainer_for(make_config, block)
    CALLED.clear()
    for total in (1.0, 2.0):
        meta = sandbox.put_rollout(rollout())
        metrics: dict = {}
        out = trainer._compute_advantage(meta, metrics)
        assert CALLED == [] and "rollout_is_weights" not in out.fields
        assert metrics["dataflex/empty_step"] == 1.0 and metrics["dataflex/empty_step_total"] == total
        assert metrics["dataflex/uniform_fallback"] == 0.0
        assert "advantages" in out.fields  # verl's own step went on
        sandbox.clear(meta)


# -- security: a module planted in a locked package while the job runs ------------------------------------


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A throwaway site-packages pip installs into, in front of ``sys.path``, in a fresh process's state."""
    with plugin_sites.pip_site(tmp_path, monkeypatch, alone=False) as pip_site:
        yield pip_site


def test_a_module_planted_in_a_locked_package_never_runs_at_step_time(make_config, queue, site, marker, tmp_path):
    site.install_files("hs-lazy", "0.1.0", hostile_suite.LAZY_PLUGIN, {"hs_lazy": "hs_lazy"})
    lock = tmp_path / "dataflex_plugins.lock"
    write_lock(lock_environment(), lock)
    forget_installed_plugins()
    block = {**hostile_suite.LAZY_BLOCK, "on_invalid": "uniform", "plugins": {"lock": str(lock)}}
    trainer = trainer_for(make_config, block)
    (site.root / hostile_suite.PLANTED).write_text(HOSTILE + hostile_suite.PLANTED_TAIL)  # while the job runs
    meta = sandbox.put_rollout(sandbox.synthetic_rollout(num_prompts=4, n=4))
    trainer._compute_advantage(meta, {})  # the lock refuses the planted file: the scorer's import fails
    sandbox.clear(meta)
    assert not marker.exists()
    assert trainer.dataflex.uniform_fallbacks == 1  # dataflex.on_invalid: uniform covers the failed call
