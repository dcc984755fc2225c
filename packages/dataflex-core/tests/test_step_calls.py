"""The step against components that misbehave: every rule of ``step.calls`` and the no-valid-token rule.

Each test is a fault a plugin author makes (or an attacker plants) and what the step owes the user for
it: an error naming the component, its distribution and the step, a fallback ``on_invalid: uniform``
counts, or the framework's own step; never weights computed from changed inputs, never a raw traceback.
"""

from __future__ import annotations

import logging
import random
import time

import numpy as np
import pytest
import torch

from dataflex_core import (
    Batch,
    ComponentError,
    ConfigError,
    InvalidOutputError,
    Mixer,
    Reweighter,
    Scorer,
    Selector,
    mean_one,
    register_mixer,
    register_reweighter,
    register_scorer,
    register_selector,
)
from dataflex_core.runner import DataFlexStep, mount_step
from dataflex_core.step import (
    DomainMixtureSampler,
    FieldSupport,
    HostCapabilities,
    LossWeights,
    SeamSupport,
    TrainSampler,
)

HOST = HostCapabilities(
    name="testhost",
    fields={name: FieldSupport(True) for name in ("response_mask", "rm_scores", "advantages", "uid")},
    seams={LossWeights: SeamSupport(True), TrainSampler: SeamSupport(True)},
)
CALLS: list[str] = []


def block(scorer="calltest_reward", actuator="calltest_plus", mechanism="reweight", **extra):
    return {"mechanism": mechanism, "scorer": {"name": scorer}, "actuator": {"name": actuator}, **extra}


def step_for(unit="sequence", **kwargs) -> DataFlexStep:
    return mount_step(block(**kwargs), HOST, loss_unit=unit)


def rollout(lengths=(2, 3, 1, 4), padding=None, uid=None) -> Batch:
    lengths = torch.as_tensor(lengths)
    mask = (torch.arange(4).unsqueeze(0) < lengths.unsqueeze(1)).long()
    rewards = torch.arange(len(lengths), dtype=torch.float32).unsqueeze(1) * mask
    tensors = {"response_mask": mask, "rm_scores": rewards, "advantages": rewards - 1.0}
    if padding is not None:
        tensors["is_padding"] = torch.as_tensor(padding)
    objects = {"uid": np.asarray(uid if uid is not None else [f"g{i // 2}" for i in range(len(lengths))], dtype=object)}
    return Batch(tensors, objects)


@register_scorer("calltest_reward")
class RewardScorer(Scorer):
    requires = ["rm_scores"]

    def score(self, batch, step_id, **ctx):
        CALLS.append("score")
        return batch.batch["rm_scores"].sum(-1)


@register_reweighter("calltest_plus")
class PlusReweighter(Reweighter):
    def act(self, scores, batch, **ctx):
        CALLS.append("act")
        return mean_one(scores.float() + 1.0, batch)


@register_reweighter("calltest_constant")
class ConstantReweighter(Reweighter):
    """Every sample the same weight, whatever it is: a test sets ``value``."""

    accepts_granularity = ("prompt", "response", "token")
    value = 1.0
    dtype = torch.float32

    def act(self, scores, batch, **ctx):
        return torch.full(scores.shape, self.value, dtype=self.dtype)


@register_reweighter("calltest_one_huge")
class OneHugeReweighter(Reweighter):
    """Weight 3e38 on the first row, 1 on the others: their float32 sum is inf."""

    def act(self, scores, batch, **ctx):
        weights = torch.ones(len(batch))
        weights[0] = 3e38
        return weights


# -- 5. weights whose float32 sum overflows ------------------------------------------------


@pytest.mark.parametrize("unit", ["token", "sequence"])
@pytest.mark.parametrize(
    ("value", "dtype"), [(1e38, torch.float32), (3.4e38, torch.float32), (1e300, torch.float64), (1e-42, torch.float32)]
)
def test_weights_whose_sum_overflows_or_underflows_are_normalised_not_zeroed(unit, value, dtype, monkeypatch):
    monkeypatch.setattr(ConstantReweighter, "value", value)
    monkeypatch.setattr(ConstantReweighter, "dtype", dtype)
    result = step_for(unit, actuator="calltest_constant").run(rollout(), step=1)
    assert result.applied.dtype == torch.float32
    torch.testing.assert_close(result.applied, torch.ones(4))  # equal weights are uniform weights
    assert result.metrics["dataflex/weight/mean"] == pytest.approx(1.0)


def test_one_weight_near_float32s_largest_value_takes_the_step_and_the_others_keep_theirs():
    result = step_for("sequence", actuator="calltest_one_huge").run(rollout(), step=1)
    # mean one over four sequences: the huge row carries almost all of it, the others 1/3e38 of it, not 0
    assert result.applied[0].item() == pytest.approx(4.0)
    assert (result.applied[1:] > 0).all() and torch.isfinite(result.applied).all()
    assert result.metrics["dataflex/weight/mean"] == pytest.approx(1.0)


def test_token_weights_and_importance_weights_whose_sums_overflow_keep_the_frameworks_step_size(monkeypatch):
    monkeypatch.setattr(ConstantReweighter, "value", 2e38)
    step = mount_step(block(scorer="calltest_token", actuator="calltest_constant"), HOST, loss_unit="token")
    batch = rollout()
    importance = torch.full((4, 4), 2.0)
    result = step.run(batch, step=1, importance_weights=importance)
    valid = batch.batch["response_mask"].bool()
    torch.testing.assert_close(result.applied[valid], torch.full((int(valid.sum()),), 2.0))
    assert result.metrics["dataflex/weight/mean"] == pytest.approx(1.0)


@register_scorer("calltest_token")
class TokenScorer(Scorer):
    granularity = "token"

    def score(self, batch, step_id, **ctx):
        return torch.ones(batch.batch["response_mask"].shape)


# -- 6. inputs are read-only ----------------------------------------------------------------


@register_scorer("calltest_zeroes_mask")
class ZeroesMask(Scorer):
    """Clears the first row's mask in place: the weights would then disagree with the metrics."""

    def score(self, batch, step_id, **ctx):
        batch.batch["response_mask"][0] = 0
        return torch.ones(len(batch))


@register_reweighter("calltest_shifts_scores")
class ShiftsScores(Reweighter):
    def act(self, scores, batch, **ctx):
        scores.add_(1.0)
        return torch.ones(len(batch))


@register_scorer("calltest_renames_uid")
class RenamesUid(Scorer):
    def score(self, batch, step_id, **ctx):
        batch.non_tensor_batch["uid"][0] = "stolen"
        return torch.ones(len(batch))


@register_scorer("calltest_swaps_fields")
class SwapsFields(Scorer):
    """Replaces entries of the batch it was given (its own container): nothing outside the call sees it."""

    requires = ["rm_scores"]

    def score(self, batch, step_id, **ctx):
        batch.batch["response_mask"] = torch.zeros_like(batch.batch["response_mask"])
        batch.batch["rm_scores"] = -batch.batch["rm_scores"]
        return torch.ones(len(batch))


@pytest.mark.parametrize(
    ("scorer", "actuator", "where"),
    [
        ("calltest_zeroes_mask", "calltest_plus", "scorer calltest_zeroes_mask changed its input "
         r"batch.batch\['response_mask'\] in place in score\(\) at step 2"),
        ("calltest_reward", "calltest_shifts_scores", r"reweighter calltest_shifts_scores changed its input scores "
         r"in place in act\(\) at step 2"),
    ],
)  # fmt: skip
def test_a_component_that_changes_a_tensor_in_place_is_named_and_uniform_falls_back(scorer, actuator, where):
    batch = rollout()
    mask = batch.batch["response_mask"].clone()
    with pytest.raises(ComponentError, match=where + "; components get read-only inputs: clone a tensor"):
        step_for(scorer=scorer, actuator=actuator).run(batch, step=2)
    lenient = mount_step(block(scorer, actuator, on_invalid="uniform"), HOST, loss_unit="sequence")
    result = lenient.run(rollout(), step=2)
    assert result.applied is None and result.fallback and result.metrics["dataflex/uniform_fallback_total"] == 1.0
    assert torch.equal(batch.batch["response_mask"][1:], mask[1:])


def test_a_component_cannot_write_into_the_batchs_arrays():
    batch = rollout()
    with pytest.raises(ComponentError, match=r"raised in score\(\) at step 1: ValueError: .*read-only.*components get "
                       "read-only inputs"):  # fmt: skip
        step_for(scorer="calltest_renames_uid").run(batch, step=1)
    assert batch.non_tensor_batch["uid"][0] == "g0" and batch.non_tensor_batch["uid"].flags.writeable


def test_replacing_an_entry_of_the_batch_changes_nothing_outside_the_call():
    clean = step_for(scorer="calltest_reward", actuator="calltest_constant").run(rollout(), step=1)
    swapped = step_for(scorer="calltest_swaps_fields", actuator="calltest_constant").run(rollout(), step=1)
    torch.testing.assert_close(swapped.applied, clean.applied)
    assert swapped.metrics["dataflex/valid_tokens"] == clean.metrics["dataflex/valid_tokens"] == 10.0


# -- 7. no autograd graph reaches the host --------------------------------------------------


@register_reweighter("calltest_parameter")
class ParameterReweighter(Reweighter):
    """Returns a learnable parameter as its weights (a component that trains its own weights)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.weights = torch.nn.Parameter(torch.ones(4))

    def act(self, scores, batch, **ctx):
        return self.weights


@register_scorer("calltest_graph")
class GraphScorer(Scorer):
    def score(self, batch, step_id, **ctx):
        with torch.enable_grad():
            leaf = torch.ones(len(batch), requires_grad=True)
            return leaf * 2.0


@pytest.mark.parametrize(
    ("scorer", "actuator"), [("calltest_reward", "calltest_parameter"), ("calltest_graph", "calltest_plus")]
)
def test_weights_reach_the_host_without_an_autograd_graph(scorer, actuator):
    for unit in ("token", "sequence"):
        result = step_for(unit, scorer=scorer, actuator=actuator).run(rollout(), step=1)
        assert not result.applied.requires_grad and result.applied.grad_fn is None
        assert not result.factor.requires_grad


# -- 8. a step with no valid token -------------------------------------------------------------


@register_selector("calltest_keep_all")
class KeepAll(Selector):
    def act(self, scores, batch, **ctx):
        CALLS.append("act")
        return torch.ones(len(batch), dtype=torch.bool)


@register_mixer("calltest_mixer")
class RecordingMixer(Mixer):
    def act(self, scores, batch, **ctx):
        CALLS.append("act")
        return torch.tensor([0.5, 0.5])

    def observe(self, scores, batch, **ctx):
        CALLS.append("observe")


@pytest.mark.parametrize(
    ("mechanism", "actuator", "extra"),
    [("reweight", "calltest_plus", {}), ("select", "calltest_keep_all", {}),
     ("mix", "calltest_mixer", {"domains": ["x", "y"]})],
)  # fmt: skip
@pytest.mark.parametrize(
    "batch",
    [
        rollout([0, 0, 0, 0]),
        rollout([2, 3, 1, 4], padding=[True] * 4),
        rollout([0, 3, 0, 2], padding=[False, True, False, True]),
    ],
    ids=["every-response-empty", "every-row-padding", "empty-or-padding"],
)
def test_a_step_without_a_valid_token_calls_no_component_and_is_counted(mechanism, actuator, extra, batch):
    step = mount_step(block(actuator=actuator, mechanism=mechanism, **extra), HOST, loss_unit="token")
    sampler = DomainMixtureSampler([0, 1], ["x", "y"], 2, torch.tensor([0.5, 0.5])) if mechanism == "mix" else None
    step.sampler = sampler
    batch.non_tensor_batch["domain"] = np.asarray(["x"] * len(batch), dtype=object)
    CALLS.clear()
    for total in (1.0, 2.0):
        result = step.run(batch, step=int(total))
        assert CALLS == []
        assert result.applied is None and result.kept is None and not result.fallback
        assert result.metrics["dataflex/empty_step"] == 1.0 and result.metrics["dataflex/empty_step_total"] == total
    full_batch = rollout()
    full_batch.non_tensor_batch["domain"] = np.asarray(["x", "y", "x", "y"], dtype=object)
    full = step.run(full_batch, step=3)
    assert CALLS and full.metrics["dataflex/empty_step"] == 0.0 and full.metrics["dataflex/empty_step_total"] == 2.0


# -- 13. a component's exception, or output on another device -----------------------------------


@register_scorer("calltest_raises")
class RaisingScorer(Scorer):
    error: BaseException = ValueError("the reward model is not loaded")

    def score(self, batch, step_id, **ctx):
        raise type(self).error


@register_reweighter("calltest_elsewhere")
class ElsewhereReweighter(Reweighter):
    """Weights on another device than the batch (``meta`` stands in for a GPU on a CPU-only run)."""

    def act(self, scores, batch, **ctx):
        return torch.ones(len(batch), device="meta")


def test_a_components_exception_names_it_the_method_and_the_step():
    with pytest.raises(ComponentError) as info:
        step_for(scorer="calltest_raises").run(rollout(), step=7)
    message = str(info.value)
    assert message == "scorer calltest_raises raised in score() at step 7: ValueError: the reward model is not loaded"
    assert info.value.component == "scorer calltest_raises"
    assert isinstance(info.value.__cause__, ValueError)


@pytest.mark.parametrize("error", [KeyError("uid"), SystemExit(2), RuntimeError("CUDA error: device-side assert")])
def test_on_invalid_uniform_covers_a_components_exception_and_logs_its_traceback_once(error, monkeypatch, caplog):
    monkeypatch.setattr(RaisingScorer, "error", error)
    step = mount_step(block(scorer="calltest_raises", on_invalid="uniform"), HOST, loss_unit="token")
    with caplog.at_level(logging.WARNING, logger="dataflex_core.step"):
        for total in (1.0, 2.0):
            result = step.run(rollout(), step=int(total))
            assert result.applied is None and result.metrics["dataflex/uniform_fallback_total"] == total
    warnings = [r for r in caplog.records if "on_invalid=uniform" in r.getMessage()]
    assert len(warnings) == 2 and f"raised in score() at step 1: {type(error).__name__}" in warnings[0].getMessage()
    assert warnings[0].exc_info is not None and warnings[1].exc_info is None


def test_keyboard_interrupt_in_a_component_is_never_caught(monkeypatch):
    monkeypatch.setattr(RaisingScorer, "error", KeyboardInterrupt())
    step = mount_step(block(scorer="calltest_raises", on_invalid="uniform"), HOST, loss_unit="token")
    with pytest.raises(KeyboardInterrupt):
        step.run(rollout(), step=1)


def test_weights_on_another_device_are_invalid_output_naming_both_devices():
    with pytest.raises(InvalidOutputError, match=r"reweighter calltest_elsewhere returned invalid weights at step 4: "
                       r"it is on device meta, but the batch is on cpu; return it on the batch's device"):  # fmt: skip
        step_for(actuator="calltest_elsewhere").run(rollout(), step=4)


# -- process-wide settings --------------------------------------------------------------------


@register_scorer("calltest_float64")
class Float64Scorer(Scorer):
    def score(self, batch, step_id, **ctx):
        torch.set_default_dtype(torch.float64)
        torch.set_num_threads(1)
        return torch.ones(len(batch))


@register_scorer("calltest_draws")
class DrawingScorer(Scorer):
    """Breaks ties with the global random generators instead of one of its own."""

    def score(self, batch, step_id, **ctx):
        noise = torch.rand(len(batch)) + float(np.random.rand()) + random.random()
        return torch.ones(len(batch)) + 0 * noise


def test_a_component_that_changes_torchs_settings_has_them_put_back_and_is_named_once(caplog):
    threads = torch.get_num_threads()
    step = step_for(scorer="calltest_float64")
    with caplog.at_level(logging.WARNING, logger="dataflex_core.step"):
        for i in (1, 2):
            step.run(rollout(), step=i)
            assert torch.get_default_dtype() == torch.float32 and torch.get_num_threads() == threads
    messages = [r.getMessage() for r in caplog.records]
    dtype = [m for m in messages if "default dtype" in m]
    assert len(dtype) == 1 and "scorer calltest_float64 changed torch's default dtype (torch.float32 -> torch.float64) " \
        "in score() at step 1; DataFlex put it back" in dtype[0]  # fmt: skip
    assert len([m for m in messages if "CPU thread count" in m]) == (1 if threads != 1 else 0)


def test_a_components_draws_leave_the_frameworks_random_streams_where_they_were(caplog):
    step = step_for(scorer="calltest_draws")
    torch.manual_seed(0), np.random.seed(0), random.seed(0)
    expected = (torch.rand(3), np.random.rand(3), random.random())
    torch.manual_seed(0), np.random.seed(0), random.seed(0)
    with caplog.at_level(logging.WARNING, logger="dataflex_core.step"):
        step.run(rollout(), step=1)
        step.run(rollout(), step=2)
    got = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(got[0], expected[0]) and np.array_equal(got[1], expected[1]) and got[2] == expected[2]
    (warning,) = [r.getMessage() for r in caplog.records if "random number generator" in r.getMessage()]
    assert "scorer calltest_draws drew from the global random number generator(s) of torch, numpy, random" in warning


# -- a component that hangs ------------------------------------------------------------------------


@register_scorer("calltest_slow")
class SlowScorer(Scorer):
    seconds = 0.0

    def score(self, batch, step_id, **ctx):
        time.sleep(type(self).seconds)  # the line the warning points at
        return torch.ones(len(batch))


def test_a_call_past_its_budget_is_named_while_it_still_runs(monkeypatch, caplog):
    monkeypatch.setattr(SlowScorer, "seconds", 2.5)
    step = mount_step(block(scorer="calltest_slow", call_budget_s=0.5), HOST, loss_unit="token")
    with caplog.at_level(logging.WARNING, logger="dataflex_core.step"):
        step.run(rollout(), step=3)
        returned = time.time()
    running = [r for r in caplog.records if "has run for" in r.getMessage()]
    assert running, "no warning while the call ran"
    first = running[0]
    assert first.created < returned - 0.5  # logged while the call still ran
    assert "scorer calltest_slow: score() at step 3 has run for" in first.getMessage()
    assert "past dataflex.call_budget_s=0.5" in first.getMessage()
    assert "test_step_calls.py" in first.getMessage() and "in score" in first.getMessage()
    assert any("scorer calltest_slow: score() at step 3 returned after" in r.getMessage() for r in caplog.records)


def test_a_call_within_its_budget_logs_nothing_and_the_budget_is_checked(caplog):
    step = mount_step(block(scorer="calltest_slow", call_budget_s=30), HOST, loss_unit="token")
    with caplog.at_level(logging.WARNING, logger="dataflex_core.step"):
        step.run(rollout(), step=1)
    assert not [r for r in caplog.records if "call_budget_s" in r.getMessage()]
    assert mount_step(block(call_budget_s=None), HOST, loss_unit="token").calls.budget_s is None
    for bad in (0, -1, "60", True):
        with pytest.raises(ConfigError, match=f"dataflex.call_budget_s={bad!r} must be a number of seconds > 0"):
            mount_step(block(call_budget_s=bad), HOST, loss_unit="token")
