"""Host seams: a mechanism declares the seams it needs, a host the seams it provides, the session hands them over.

Mount refuses a mechanism whose seam the host lacks, with the host's reason; ``session.seam(kind)`` is the one
way a host reaches the mounted mechanism's code, and ``None`` for a seam the mechanism does not use.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from dataflex_core import IncompatibleComponentError, Selector, register_selector
from dataflex_core.mechanisms import LossMechanism, Mechanism, register_mechanism, unregister_mechanism
from dataflex_core.session import (
    SEAMS,
    DataFlexSession,
    FieldSupport,
    GenerationRounds,
    HostCapabilities,
    LossWeights,
    PromptCounts,
    Seam,
    SeamSupport,
    TrainSampler,
)
from dataflex_core.step import StepResult
from dataflex_lab.testing import rows_batch
from dataflex_lab.testing.components import register_toy_components

register_toy_components("seamtest")

FIELDS = {n: FieldSupport(True) for n in ("response_mask", "rm_scores", "uid", "advantages")}
HOST = HostCapabilities(name="seamhost", fields=FIELDS, recompute_advantage=True, hard_drop=True)
REWEIGHT = {"scorer": {"name": "seamtest_reward"}, "actuator": {"name": "seamtest_proportional"}}


class Staged(Seam):
    """A seam of the kind a new mechanism brings: one the hosts of this release do not declare."""

    name = "staged_test"
    does = "generate a step in stages"


class Stages(Staged):
    def __init__(self, step):
        self.step = step


@register_mechanism
class StagedWeights(LossMechanism):
    """Weights of one, after stages a host runs (the shape of a staged mechanism, not its logic)."""

    name = "seamtest_staged"
    actuator_kind = "reweighter"
    seams = (LossWeights, Staged)

    def implement(self, seam, step):
        return Stages(step) if seam is Staged else super().implement(seam, step)

    def weights(self, step, batch, step_id):
        assert step.generation == "the stages", step.generation  # what the host handed run(generation=...)
        return torch.ones(len(batch))


@register_mechanism
class Unimplemented(Mechanism):
    name = "seamtest_unimplemented"
    actuator_kind = "reweighter"
    seams = (Staged,)

    def run(self, step, batch, step_id, importance_weights):
        return StepResult({})


@register_selector("seamtest_recompute")
class RecomputingSelector(Selector):
    recompute_advantage = True

    def act(self, scores, batch, **ctx):
        return torch.arange(len(scores))


def mounted(block, host=HOST) -> DataFlexSession:
    flex = DataFlexSession(block)
    flex.mount(host, loss_unit="token", adv_estimator="grpo", is_group_estimator=lambda name: True)
    return flex


def test_the_session_hands_the_host_the_seams_the_mechanism_declares_and_none_of_the_others():
    flex = mounted(REWEIGHT)
    assert isinstance(flex.seam(LossWeights), LossWeights)
    assert flex.seam(LossWeights) is flex.seam(LossWeights)  # one implementation per run
    for kind in (TrainSampler, GenerationRounds, PromptCounts, Staged):
        assert flex.seam(kind) is None, kind
    with pytest.raises(TypeError, match="seam class"):
        flex.seam("loss_weights")


def test_a_seam_the_host_lacks_is_refused_at_mount_with_the_hosts_reason():
    host = dataclasses.replace(
        HOST, seams={LossWeights: SeamSupport(True), Staged: SeamSupport(False, "it rolls once")}
    )
    block = {**REWEIGHT, "mechanism": "seamtest_staged"}
    with pytest.raises(IncompatibleComponentError, match="needs the host to generate a step in stages, but seamhost "
                       "cannot: it rolls once"):  # fmt: skip
        mounted(block, host)
    with pytest.raises(IncompatibleComponentError, match="it does not declare the staged_test seam"):
        mounted(block)  # a seam the host does not list is one it lacks


def test_a_new_seam_reaches_the_host_and_its_state_reaches_the_mechanism():
    host = dataclasses.replace(HOST, seams={LossWeights: SeamSupport(True), Staged: SeamSupport(True)})
    flex = mounted({**REWEIGHT, "mechanism": "seamtest_staged"}, host)
    stages = flex.seam(Staged)
    assert isinstance(stages, Stages) and stages.step is flex
    result = flex.run(rows_batch([2, 3], width=3, rewards=[1.0, 0.0]), 1, generation="the stages")
    assert result.applied is not None and flex.generation is None  # cleared once the step ran


def test_a_declared_seam_without_an_implementation_is_named():
    host = dataclasses.replace(HOST, seams={Staged: SeamSupport(True)})
    flex = mounted({**REWEIGHT, "mechanism": "seamtest_unimplemented"}, host)
    with pytest.raises(NotImplementedError, match="declares the seam 'staged_test' but does not implement it"):
        flex.seam(Staged)


def test_select_tells_the_host_through_the_loss_weights_seam_what_to_do_with_the_kept_rows():
    flex = mounted({"mechanism": "select", "scorer": {"name": "seamtest_reward"}, "actuator": "seamtest_recompute"})
    weights = flex.seam(LossWeights)
    assert weights.recompute_advantage and weights.hard_drop
    plain = mounted({**REWEIGHT}).seam(LossWeights)
    assert not plain.recompute_advantage and not plain.hard_drop


def test_a_host_declares_seam_classes_only():
    with pytest.raises(TypeError, match="keys are seam classes"):
        HostCapabilities(name="bad", seams={"generation_rounds": SeamSupport(True)})


def test_every_seam_of_this_release_has_a_name_and_says_what_the_host_does():
    assert [s.name for s in SEAMS] == [
        "loss_weights", "train_sampler", "generation_rounds", "prompt_counts", "staged_generation"
    ]  # fmt: skip
    assert all(s.does for s in SEAMS)


@pytest.fixture(autouse=True, scope="module")
def _unregister():
    yield
    unregister_mechanism(StagedWeights.name)
    unregister_mechanism(Unimplemented.name)
