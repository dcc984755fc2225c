"""A small suite of hostile plugins that every host's tests run against its real step path.

One or two faults of each class issue 24 found, written once so that a host's
tests, and every host added later, keep each class closed:

- **security**: a locked plugin that, at run time, imports a module planted in
  its package after the lock was written (:data:`LAZY_PLUGIN`, :data:`PLANTED`):
  the lock refuses the file, the call fails as any other;
- **silent wrong training**: weights whose float32 sum overflows
  (``hostile_overflow``), a scorer that changes a framework tensor in place
  (``hostile_shifts_logps``), weights that carry an autograd graph
  (``hostile_parameter``);
- **faults that break a run**: a scorer that raises (``hostile_raises``), a step
  with no valid token (each host builds its own), component state that cannot
  be checkpointed (``hostile_unpicklable``).

A host's test subclasses :class:`HostileStepSuite` with a ``hostile`` fixture, a
:class:`HostileHarness` that runs a block through its framework's real step and
describes what happened as a :class:`StepOutcome`; the suite runs each of
:data:`STEP_CASES` under ``on_invalid: raise`` and ``uniform`` and hands the
outcome to :func:`check_outcome`, which holds what the user is owed; the save,
resume and lock cases need the host's own checkpoint
and plugin-site machinery and are written in the host's test with the
components and texts here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from dataflex_core import ComponentError, Reweighter, Scorer, mean_one, register_reweighter, register_scorer


@register_scorer("hostile_plain")
class PlainScorer(Scorer):
    """A well-behaved partner: the mean |advantage| of each response."""

    requires = ["advantages"]

    def score(self, batch, step_id, **ctx):
        mask = batch.batch["response_mask"].bool()
        adv = torch.where(mask, batch.batch["advantages"].abs(), torch.zeros(()))
        return adv.sum(-1) / mask.sum(-1).clamp(min=1)


@register_reweighter("hostile_plus")
class PlusReweighter(Reweighter):
    """A well-behaved partner: ``scores + 1``, mean one."""

    def act(self, scores, batch, **ctx):
        return mean_one(scores.float() + 1.0, batch)


@register_reweighter("hostile_overflow")
class OverflowReweighter(Reweighter):
    """1e38 for every sample: equal weights, whose float32 sum is inf (they used to be written as zeros)."""

    def act(self, scores, batch, **ctx):
        return torch.full(scores.shape, 1e38)


@register_scorer("hostile_shifts_logps")
class ShiftsLogProbs(Scorer):
    """Adds 1 to ``old_log_probs`` in place (in TRL on one CPU process that was TRL's own importance ratio)."""

    requires = ["old_log_probs"]

    def score(self, batch, step_id, **ctx):
        batch.batch["old_log_probs"].add_(1.0)
        return torch.ones(len(batch))


@register_reweighter("hostile_parameter")
class ParameterReweighter(Reweighter):
    """Returns a learnable ``nn.Parameter`` as its weights (the graph used to reach TRL's advantages)."""

    def act(self, scores, batch, **ctx):
        return torch.nn.Parameter(torch.ones(len(batch)))


@register_scorer("hostile_raises")
class RaisingScorer(Scorer):
    requires = ["advantages"]

    def score(self, batch, step_id, **ctx):
        raise RuntimeError("the reward model server is down")


@register_scorer("hostile_unpicklable")
class UnpicklableStateScorer(Scorer):
    """Its state is a list until it scores, then a numpy array, which a checkpoint cannot hold as data."""

    requires = ["advantages"]

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seen: object = []

    def score(self, batch, step_id, **ctx):
        self.seen = np.arange(len(batch))
        return torch.ones(len(batch))

    def state_dict(self):
        return {"seen": self.seen}

    def load_state_dict(self, state):
        self.seen = state["seen"]


@register_scorer("hostile_unpicklable_at_mount")
class UnpicklableFromTheStart(UnpicklableStateScorer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seen = np.zeros(3)


#: What the save of ``hostile_unpicklable``'s state is refused with.
UNPICKLABLE_MATCH = (
    r"dataflex scorer hostile_unpicklable: its state cannot be checkpointed \(state\['seen'\] is a numpy.ndarray\)"
)


@dataclass(frozen=True)
class StepCase:
    """One hostile pipeline, and what the step owes the user for it."""

    id: str
    fault_class: str
    scorer: str
    actuator: str
    #: What the step raises under ``on_invalid: raise`` (``None``: it runs).
    error: type[BaseException] | None = None
    match: str = ""
    #: The framework's loss comes out as its own (weights 1), with DataFlex on.
    framework_loss: bool = False
    #: The host's framework configuration these components need (``old_log_probs`` computed, ...).
    needs: tuple[str, ...] = field(default=())

    def block(self, on_invalid: str) -> dict:
        return {
            "mechanism": "reweight",
            "scorer": {"name": self.scorer},
            "actuator": {"name": self.actuator},
            "on_invalid": on_invalid,
        }


STEP_CASES = (
    StepCase("overflow", "silent-wrong", "hostile_plain", "hostile_overflow", framework_loss=True),
    StepCase(
        "in-place",
        "silent-wrong",
        "hostile_shifts_logps",
        "hostile_plus",
        ComponentError,
        r"scorer hostile_shifts_logps changed its input batch.batch\['old_log_probs'\] in place in score\(\) at step "
        r"\d+; components get read-only inputs",
        needs=("old_log_probs",),
    ),  # fmt: skip
    StepCase("graph", "silent-wrong", "hostile_plain", "hostile_parameter"),
    StepCase(
        "exception",
        "breaking",
        "hostile_raises",
        "hostile_plus",
        ComponentError,
        r"scorer hostile_raises raised in score\(\) at step \d+: RuntimeError: the reward model server is down",
    ),  # fmt: skip
)


@dataclass
class StepOutcome:
    """What one step through a host's real step path did, in terms every host can state."""

    #: What the step raised, if anything.
    error: BaseException | None
    #: The step's ``dataflex/*`` metrics (empty when it raised).
    metrics: dict[str, float]
    #: The loss the framework computes is its own: weights 1 (TRL: its advantages unchanged).
    framework_loss: bool
    #: The framework's tensors the host handed to the step are as the framework computed them.
    framework_tensors_unchanged: bool
    #: What the host writes into the loss carries an autograd graph.
    weights_have_graph: bool


def check_outcome(case: StepCase, on_invalid: str, outcome: StepOutcome) -> None:
    """What a user is owed for ``case``: a named error, a counted fallback to the framework's loss, or right weights."""
    assert outcome.framework_tensors_unchanged, "the step changed a tensor the framework reads"
    if case.error is not None and on_invalid == "raise":
        assert isinstance(outcome.error, case.error), f"expected {case.error.__name__}, got {outcome.error!r}"
        assert re.search(case.match, str(outcome.error)), str(outcome.error)
        return
    assert outcome.error is None, f"{case.id} under on_invalid={on_invalid} raised {outcome.error!r}"
    assert not outcome.weights_have_graph, "an autograd graph reached the framework's loss"
    assert outcome.metrics["dataflex/active"] == 1.0
    if case.error is not None:
        assert outcome.metrics["dataflex/uniform_fallback"] == 1.0
        assert outcome.framework_loss, "a fallback must leave the framework's loss as it is"
    else:
        assert outcome.metrics["dataflex/uniform_fallback"] == 0.0
    if case.framework_loss:
        assert outcome.framework_loss, f"{case.id}: uniform weights must give the framework's own loss"


class HostileHarness:
    """A host's real step path, driven by :class:`HostileStepSuite`."""

    def outcome(self, block: dict) -> StepOutcome:
        """Run one step of the framework with the ``dataflex:`` ``block`` and say what it did."""
        raise NotImplementedError(
            f"{type(self).__name__}.outcome(block) must run one real step of the framework with the dataflex block "
            "(catching what it raises) and return a StepOutcome"
        )


class HostileStepSuite:
    """Every hostile pipeline under ``on_invalid: raise`` and ``uniform`` on a host's real step: subclass it in
    the host's tests and define the ``hostile`` fixture (a :class:`HostileHarness`)."""

    @pytest.fixture
    def hostile(self) -> HostileHarness:
        raise NotImplementedError("define the `hostile` fixture: a HostileHarness over the framework's real step")

    @pytest.mark.parametrize("on_invalid", ["raise", "uniform"])
    @pytest.mark.parametrize("case", STEP_CASES, ids=lambda c: f"{c.fault_class}-{c.id}")
    def test_a_hostile_plugin_is_named_falls_back_or_weighs_right(self, hostile, case, on_invalid):
        check_outcome(case, on_invalid, hostile.outcome(case.block(on_invalid)))


# -- security: a module planted in a locked package, imported at run time ----------------------------

#: A plugin that imports an optional module of its own package when it first scores (a common pattern).
LAZY_PLUGIN = {
    "hs_lazy/__init__.py": "from . import scorers  # noqa: F401\n",
    "hs_lazy/scorers.py": """
import torch

from dataflex_core import Scorer, register_scorer


@register_scorer("hs_lazy_fast")
class FastScorer(Scorer):
    requires = ["advantages"]

    def score(self, batch, step_id, **ctx):
        from . import accel  # imported when first needed

        return accel.magnitude(batch)
""",
}
#: Where the attacker plants code, inside the locked package (its own code, :data:`HOSTILE` of the kit, first).
PLANTED = "hs_lazy/accel.py"
PLANTED_TAIL = """

def magnitude(batch):
    import torch

    return torch.ones(len(batch))
"""
LAZY_BLOCK = {"mechanism": "reweight", "scorer": {"name": "hs_lazy_fast"}, "actuator": {"name": "hostile_plus"}}
