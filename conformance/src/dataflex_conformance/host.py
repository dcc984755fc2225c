"""The tests every DataFlex host passes, given a harness over its real framework.

A host is the framework's seams around :class:`~dataflex_core.session.DataFlexSession`;
whatever the framework, a user is owed the same things, and this module asserts them:

- **uniform weights leave the framework's loss unchanged**: the loss of a step with DataFlex giving every
  valid token weight 1 is the framework's own loss on the same batch;
- **weights reach the loss**: weights that differ change the loss, and they have mean one in the loss's
  unit over the valid tokens (the framework's step size is kept);
- **padding rows and empty responses get weight 0**, and so does every token outside the loss mask;
- **invalid output** raises, naming the component (``on_invalid: raise``, the default), or with
  ``on_invalid: uniform`` leaves the framework's loss as it is and counts the fallback;
- **before warmup_step** the framework trains alone (``dataflex/active`` 0, its own loss);
- **component state round-trips** through the framework's own checkpoints: a resumed run's components hold
  what the saved run's held;
- **a resume with another plugin set is refused**, and so is one with another component in a role.

A host's tests subclass :class:`HostSuite` and provide the ``host`` fixture, a :class:`HostHarness` over
the real framework (its real step and loss, its real checkpoint save and resume; no stand-in for the
framework)::

    from dataflex_conformance.host import HostHarness, HostStep, HostSuite

    class MyHarness(HostHarness):
        ...

    class TestMyHost(HostSuite):
        @pytest.fixture
        def host(self, tmp_path):
            return MyHarness(tmp_path)

The blocks name this module's own components (``hostkit_*``, registered when it is imported), so a host
needs no plugin installed to run the suite. Needs ``pytest`` (``pip install dataflex-conformance[pytest]``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import torch

from dataflex_core import (
    ConfigError,
    InvalidOutputError,
    Reweighter,
    Scorer,
    mean_one,
    register_reweighter,
    register_scorer,
    valid_sample_mask,
)
from dataflex_core.contracts import MEAN_ONE_TOLERANCE
from dataflex_core.lock import PluginSetMismatch, read_lock, write_lock
from dataflex_core.lock.file import DistRecord
from dataflex_core.lock.pinning import CHECKPOINT_PLUGIN_SET
from dataflex_core.session import DataFlexSession
from dataflex_core.step import unit_mean
from dataflex_core.step.state import CHECKPOINT_STATE

__all__ = ["BLOCKS", "HostHarness", "HostStep", "HostSuite"]


# -- the suite's components ------------------------------------------------------------------------------------
def _mean_abs_advantage(batch: Any) -> torch.Tensor:
    mask = batch.batch["response_mask"].bool()
    adv = torch.where(mask, batch.batch["advantages"].abs().to(torch.float32), torch.zeros(()))
    return adv.sum(-1) / mask.sum(-1).clamp(min=1)


@register_scorer("hostkit_constant")
class ConstantScorer(Scorer):
    """Every row scores 0.5: with ``hostkit_linear`` every valid token gets weight 1."""

    requires = ["advantages"]

    def score(self, batch, step_id, **ctx):
        return torch.full((len(batch),), 0.5)


@register_scorer("hostkit_advantage")
class AdvantageScorer(Scorer):
    """Each response's mean ``|advantage|``: weights that differ between rows."""

    requires = ["advantages"]

    def score(self, batch, step_id, **ctx):
        return _mean_abs_advantage(batch)


@register_scorer("hostkit_nan")
class NaNScorer(Scorer):
    """NaN for every valid row: output the step must refuse."""

    requires = ["advantages"]

    def score(self, batch, step_id, **ctx):
        out = torch.ones(len(batch))
        out[valid_sample_mask(batch)] = float("nan")
        return out


@register_scorer("hostkit_counter")
class CounterScorer(Scorer):
    """Counts the rows and steps it scored, and sums their scores: state a checkpoint must carry."""

    requires = ["advantages"]

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.rows = 0
        self.steps: list[int] = []
        self.total = torch.zeros((), dtype=torch.float64)

    def score(self, batch, step_id, **ctx):
        scores = _mean_abs_advantage(batch)
        self.rows += len(batch)
        self.steps.append(int(step_id))
        self.total = self.total + scores.sum().to(torch.float64)
        return scores

    def state_dict(self):
        return {"rows": self.rows, "steps": list(self.steps), "total": self.total.clone()}

    def load_state_dict(self, state):
        self.rows, self.steps, self.total = int(state["rows"]), list(state["steps"]), state["total"].clone()


@register_reweighter("hostkit_linear")
class LinearReweighter(Reweighter):
    """``scores + 0.1``, mean one: uniform for uniform scores."""

    def act(self, scores, batch, **ctx):
        return mean_one(scores.float() + 0.1, batch)


def _block(scorer: str, **more: Any) -> dict[str, Any]:
    return {"mechanism": "reweight", "scorer": {"name": scorer}, "actuator": {"name": "hostkit_linear"}, **more}


#: The ``dataflex:`` blocks the suite runs, by what they test.
BLOCKS: dict[str, dict[str, Any]] = {
    "uniform": _block("hostkit_constant"),
    "weights": _block("hostkit_advantage"),
    "invalid": _block("hostkit_nan"),
    "invalid_uniform": _block("hostkit_nan", on_invalid="uniform"),
    "warmup": _block("hostkit_advantage", warmup_step=10**9),
    "stateful": _block("hostkit_counter"),
}
#: The distribution a checkpoint of another plugin set records and this environment lacks.
ELSEWHERE = "dataflex-hostkit-elsewhere"


# -- what a host provides ----------------------------------------------------------------------------------------
@dataclass
class HostStep:
    """One training step of the framework on the harness's batch, as its loss saw it."""

    #: The framework's loss on the step's batch (a scalar), computed by the framework's own loss code.
    loss: torch.Tensor
    #: ``(rows, L)`` bool: the tokens the framework's loss counts, as the framework built them (before DataFlex).
    loss_mask: torch.Tensor
    #: ``(rows,)`` bool: the padding rows and empty responses of the batch (what no component may weigh).
    inert: torch.Tensor
    #: ``token`` or ``sequence``: the unit the framework's loss averages over in this configuration.
    loss_unit: str
    #: ``(rows, L)``: the weight of each token in the framework's loss that the host applied (``None``: it
    #: left the loss as the framework computes it).
    weights: torch.Tensor | None = None
    #: The step's ``dataflex/*`` metrics (empty without DataFlex).
    metrics: dict[str, float] = field(default_factory=dict)


class HostHarness:
    """A host's real framework, driven by the suite. Subclass it and implement the three methods.

    Every :meth:`step` runs on the same batch (same prompts, same responses, same rewards: seed it), built as
    the framework builds it, with at least one padding row or empty response.
    """

    def step(self, block: Mapping[str, Any] | None) -> HostStep:
        """One step of the framework with the ``dataflex:`` ``block`` (``None``: the framework without DataFlex).

        Run the framework's real step up to its loss on the batch and return a :class:`HostStep`; what the
        step raises propagates.
        """
        raise NotImplementedError(
            f"{type(self).__name__}.step(block) must run one real step of the framework on the harness's batch "
            "(with padding rows or empty responses) and return a HostStep: the framework's loss, its loss mask, the "
            "inert rows, the loss unit and the weights the host applied"
        )

    def save(self, block: Mapping[str, Any]) -> tuple[Path, DataFlexSession]:
        """Train a run with ``block`` for at least one step and checkpoint it through the framework's own save.

        :returns: the checkpoint folder holding DataFlex's files, and the run's session.
        """
        raise NotImplementedError(
            f"{type(self).__name__}.save(block) must train a real run with the dataflex block for a step or more, "
            "write a checkpoint through the framework's own checkpointing and return (the checkpoint folder, the "
            "run's DataFlexSession)"
        )

    def resume(self, block: Mapping[str, Any], folder: Path) -> DataFlexSession:
        """Start a new run with ``block`` resuming from ``folder`` through the framework's own resume.

        The run stops where the saved one did (no step after the resume), so its components hold what was saved.

        :returns: the run's session once the framework and DataFlex restored their state; what the resume
            raises propagates.
        """
        raise NotImplementedError(
            f"{type(self).__name__}.resume(block, folder) must start a new run with the dataflex block, resume it "
            "from the checkpoint folder through the framework's own resume path and return its DataFlexSession"
        )


# -- the suite ----------------------------------------------------------------------------------------------------
def _valid(step: HostStep) -> torch.Tensor:
    return step.loss_mask.bool() & ~step.inert.bool().unsqueeze(-1)


def _close(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    return bool(torch.allclose(actual.detach().double(), expected.detach().double(), rtol=1e-6, atol=1e-8))


def _applied(step: HostStep) -> torch.Tensor:
    assert step.weights is not None, "the host applied no weights for a step whose components gave weights"
    assert step.weights.shape == step.loss_mask.shape, (
        f"the weights have shape {tuple(step.weights.shape)}, the loss mask {tuple(step.loss_mask.shape)}"
    )
    return step.weights.detach().to(torch.float64)


def _assert_frameworks_loss(flex: HostStep, plain: HostStep) -> None:
    """The step's loss is the framework's own, and any weights the host applied are 1 on every valid token."""
    assert _close(flex.loss, plain.loss), (flex.loss.item(), plain.loss.item())
    if flex.weights is not None:
        valid = _valid(flex)
        assert _close(_applied(flex)[valid], torch.ones(int(valid.sum()), dtype=torch.float64))


class HostSuite:
    """Subclass with a ``host`` fixture returning your :class:`HostHarness`; each test below is one promise."""

    @pytest.fixture
    def host(self) -> HostHarness:
        raise NotImplementedError(
            "define the `host` fixture in your HostSuite subclass: a HostHarness over your framework's real step, "
            "loss and checkpoints (see dataflex_conformance.host)"
        )

    @pytest.fixture
    def plain(self, host: HostHarness) -> HostStep:
        """The framework's own step on the harness's batch."""
        step = host.step(None)
        assert step.inert.any(), (
            f"{type(host).__name__}'s batch has no padding row or empty response; build one as the framework does"
        )
        return step

    def test_uniform_weights_leave_the_frameworks_loss_unchanged(self, host, plain):
        flex = host.step(BLOCKS["uniform"])
        assert flex.metrics.get("dataflex/active") == 1.0, flex.metrics
        _assert_frameworks_loss(flex, plain)

    def test_weights_that_differ_change_the_loss_and_keep_its_step_size(self, host, plain):
        flex = host.step(BLOCKS["weights"])
        weights, valid = _applied(flex), _valid(flex)
        assert weights[valid].std() > 1e-3, "the batch's advantages must differ between rows for this test"
        assert not _close(flex.loss, plain.loss), "weights that differ between rows did not change the loss"
        mean = unit_mean(weights, valid, flex.loss_unit).item()
        assert abs(mean - 1.0) <= MEAN_ONE_TOLERANCE, f"weights have mean {mean} per {flex.loss_unit}, not one"

    def test_padding_rows_and_empty_responses_get_weight_zero(self, host, plain):
        flex = host.step(BLOCKS["weights"])
        weights = _applied(flex)
        inert = flex.inert.bool()
        assert torch.equal(weights[inert], torch.zeros_like(weights[inert])), weights[inert]
        outside = ~flex.loss_mask.bool()
        assert torch.equal(weights[outside], torch.zeros_like(weights[outside])), "weight outside the loss mask"
        assert flex.metrics["dataflex/zero_weight_fraction"] == 0.0, flex.metrics

    def test_invalid_output_raises_naming_the_component(self, host):
        with pytest.raises(InvalidOutputError, match=r"hostkit_nan[\s\S]*NaN"):
            host.step(BLOCKS["invalid"])

    def test_invalid_output_under_on_invalid_uniform_is_the_frameworks_loss(self, host, plain):
        flex = host.step(BLOCKS["invalid_uniform"])
        assert flex.metrics["dataflex/uniform_fallback"] == 1.0, flex.metrics
        _assert_frameworks_loss(flex, plain)

    def test_before_warmup_step_the_framework_trains_alone(self, host, plain):
        flex = host.step(BLOCKS["warmup"])
        assert flex.metrics.get("dataflex/active") == 0.0, flex.metrics
        _assert_frameworks_loss(flex, plain)

    def test_component_state_round_trips_through_the_frameworks_checkpoint(self, host):
        folder, saved = host.save(BLOCKS["stateful"])
        assert (Path(folder) / CHECKPOINT_STATE).is_file() and (Path(folder) / CHECKPOINT_PLUGIN_SET).is_file()
        state = saved.pipeline.scorer.state_dict()
        assert state["rows"] > 0 and state["steps"], "the saved run never scored: train it a step or more"
        resumed = host.resume(BLOCKS["stateful"], Path(folder))
        restored = resumed.pipeline.scorer.state_dict()
        assert (restored["rows"], restored["steps"]) == (state["rows"], state["steps"])
        assert torch.equal(restored["total"], state["total"])

    def test_a_resume_with_another_plugin_set_is_refused(self, host):
        folder, _ = host.save(BLOCKS["stateful"])
        record = Path(folder) / CHECKPOINT_PLUGIN_SET
        recorded = read_lock(record)
        other = DistRecord(ELSEWHERE, "1.0.0", {"elsewhere": "dataflex_hostkit_elsewhere"}, None, {})
        write_lock(replace(recorded, plugins={**recorded.plugins, ELSEWHERE: other}), record)
        with pytest.raises(PluginSetMismatch, match=ELSEWHERE):
            host.resume(BLOCKS["stateful"], Path(folder))

    def test_a_resume_with_another_component_in_a_role_is_refused(self, host):
        folder, _ = host.save(BLOCKS["stateful"])
        with pytest.raises(ConfigError, match="holds the state of scorer 'hostkit_counter'"):
            host.resume(BLOCKS["weights"], Path(folder))
