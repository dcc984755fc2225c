"""The host-agnostic step: what components see, what hosts get back, and the mount-time capability checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dataflex_core import (
    Batch,
    ConfigError,
    IncompatibleComponentError,
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
from dataflex_core.runner import mount_step
from dataflex_core.step import (
    DomainMixtureSampler,
    FieldSupport,
    HostCapabilities,
    LossWeights,
    SeamSupport,
    TrainSampler,
    unit_mean,
)
from dataflex_lab.testing import rows_batch

SEEN: list[Batch] = []


@register_scorer("steptest_reward")
class RewardScorer(Scorer):
    """The reward of each row; records the batch it was shown."""

    requires = ["rm_scores"]

    def score(self, batch, step_id, **ctx):
        SEEN.append(batch)
        return batch.batch["rm_scores"].sum(-1)


@register_scorer("steptest_groups")
class GroupScorer(Scorer):
    requires = ["rm_scores"]
    needs_groups = True

    def score(self, batch, step_id, **ctx):
        return torch.zeros(len(batch))


@register_scorer("steptest_token")
class TokenScorer(Scorer):
    granularity = "token"

    def score(self, batch, step_id, **ctx):
        return torch.ones(batch.batch["response_mask"].shape)


@register_scorer("steptest_values")
class ValuesScorer(Scorer):
    requires = ["values"]

    def score(self, batch, step_id, **ctx):
        return torch.zeros(len(batch))


@register_scorer("steptest_column")
class ColumnScorer(Scorer):
    requires = ["difficulty"]

    def score(self, batch, step_id, **ctx):
        return torch.zeros(len(batch))


@register_scorer("steptest_before")
class BeforeRolloutScorer(Scorer):
    timing = "pre_rollout"

    def score(self, batch, step_id, **ctx):
        return torch.zeros(len(batch))


@register_reweighter("steptest_plus")
class PlusReweighter(Reweighter):
    """``scores + 1``, mean one."""

    accepts_granularity = ("prompt", "response", "token")

    def act(self, scores, batch, **ctx):
        return mean_one(scores.float() + 1.0, batch)


@register_reweighter("steptest_nan")
class NaNReweighter(Reweighter):
    def act(self, scores, batch, **ctx):
        return torch.full((len(batch),), float("nan"))


@register_selector("steptest_first_half")
class FirstHalf(Selector):
    def act(self, scores, batch, **ctx):
        return torch.arange(len(batch) // 2)


@register_mixer("steptest_prefer_first")
class PreferFirst(Mixer):
    observed: list[int] = []

    def act(self, scores, batch, **ctx):
        return torch.tensor([0.75, 0.25])

    def observe(self, scores, batch, **ctx):
        type(self).observed.append(ctx["step_id"])


HOST = HostCapabilities(
    name="testhost",
    fields={
        "response_mask": FieldSupport(True),
        "rm_scores": FieldSupport(True),
        "uid": FieldSupport(True),
        "values": FieldSupport(False, "enable the critic"),
    },
    seams={LossWeights: SeamSupport(True), TrainSampler: SeamSupport(True)},
)


def block(scorer, actuator, mechanism="reweight", **extra):
    return {"mechanism": mechanism, "scorer": {"name": scorer}, "actuator": {"name": actuator}, **extra}


def rollout(rewards, lengths, padding=None, uid=None):
    """Rows with ``lengths`` response tokens and their reward on the last one; optional verl-style padding rows."""
    return rows_batch(lengths, width=4, rewards=rewards, padding=padding, uid=uid)


def test_components_see_padding_rows_as_empty_rows_without_a_copy_and_padding_gets_weight_zero():
    step = mount_step(block("steptest_reward", "steptest_plus"), HOST, loss_unit="sequence")
    SEEN.clear()
    batch = rollout([1.0, 0.0, 3.0, 0.0], [2, 3, 1, 0], padding=[False, False, False, True])
    result = step.run(batch, step=1)
    (seen,) = SEEN
    # every row, the very tensors the host handed over; the padding row is an empty row (no response token)
    assert len(seen) == 4 and seen.batch["rm_scores"] is batch.batch["rm_scores"]
    assert seen.batch["response_mask"][3].sum() == 0 and seen.batch["is_padding"].tolist() == [False] * 3 + [True]
    assert result.applied.shape == (4,) and result.applied[3] == 0
    # raw weights 2, 1, 4 over three valid sequences: mean one per sequence
    torch.testing.assert_close(result.applied, torch.tensor([6 / 7, 3 / 7, 12 / 7, 0.0]))
    assert result.metrics["dataflex/weight/mean"] == pytest.approx(1.0)
    assert result.metrics["dataflex/valid_samples"] == 3.0
    assert result.kept is None and not result.fallback


def test_a_padding_row_with_response_tokens_is_shown_empty_and_weighs_nothing():
    """A host that leaves tokens in its padding rows' mask: components see those rows emptied, the rest as is."""
    step = mount_step(block("steptest_reward", "steptest_plus"), HOST, loss_unit="token")
    SEEN.clear()
    padded = rollout([1.0, 5.0, 0.0], [2, 4, 3], padding=[False, True, False])
    result = step.run(padded, step=1)
    (seen,) = SEEN
    assert seen.batch["response_mask"].sum(-1).tolist() == [2, 0, 3]
    assert padded.batch["response_mask"].sum(-1).tolist() == [2, 4, 3]  # the host's own mask is left alone
    plain = step.run(rollout([1.0, 0.0], [2, 3]), step=2)
    torch.testing.assert_close(result.applied[[0, 2]], plain.applied)
    assert result.applied[1] == 0
    assert result.metrics["dataflex/valid_tokens"] == plain.metrics["dataflex/valid_tokens"] == 5.0


def test_composition_keeps_the_frameworks_step_size():
    step = mount_step(block("steptest_reward", "steptest_plus"), HOST, loss_unit="token")
    batch = rollout([1.0, 0.0], [2, 3])
    valid = batch.batch["response_mask"].bool()
    importance = torch.tensor([[0.5, 2.0, 0, 0], [1.0, 1.0, 3.0, 0]])
    result = step.run(batch, step=1, importance_weights=importance)
    assert result.applied.shape == (2, 4)
    assert unit_mean(result.applied, valid, "token").item() == pytest.approx(
        unit_mean(importance, valid, "token").item()
    )
    assert result.metrics["dataflex/weight/composed"] == 1.0
    assert result.metrics["dataflex/weight/mean"] == pytest.approx(1.0)


def test_before_warmup_the_step_leaves_the_loss_alone():
    step = mount_step({**block("steptest_reward", "steptest_plus"), "warmup_step": 3}, HOST, loss_unit="token")
    result = step.run(rollout([1.0], [2]), step=2)
    assert result.applied is None and result.metrics["dataflex/active"] == 0.0
    # its rollouts still count towards the run's compute
    assert {k: v for k, v in result.metrics.items() if not k.startswith("dataflex/compute/")} == {
        "dataflex/active": 0.0
    }
    assert result.metrics["dataflex/compute/rollouts_generated_total"] == 1.0
    assert step.run(rollout([1.0], [2]), step=3).applied is not None


def test_invalid_output_raises_or_falls_back_to_the_frameworks_loss():
    raising = mount_step(block("steptest_reward", "steptest_nan"), HOST, loss_unit="token")
    with pytest.raises(InvalidOutputError, match="at step 5: .*NaN"):
        raising.run(rollout([1.0, 0.0], [2, 2]), step=5)
    lenient = mount_step({**block("steptest_reward", "steptest_nan"), "on_invalid": "uniform"}, HOST, loss_unit="token")
    for expected_total in (1.0, 2.0):
        result = lenient.run(rollout([1.0, 0.0], [2, 2]), step=5)
        assert result.applied is None and result.fallback
        assert result.metrics["dataflex/uniform_fallback"] == 1.0
        assert result.metrics["dataflex/uniform_fallback_total"] == expected_total


def test_select_returns_the_kept_rows_and_renormalised_weights():
    step = mount_step(block("steptest_reward", "steptest_first_half", "select"), HOST, loss_unit="token")
    batch = rollout([1.0, 0.0, 1.0, 0.0], [1, 3, 2, 2], uid=["a", "a", "b", "b"])
    result = step.run(batch, step=1)
    assert result.kept.tolist() == [True, True, False, False]
    # kept rows carry the dropped rows' tokens: 8 valid tokens over 4 kept ones
    torch.testing.assert_close(result.applied, torch.tensor([2.0, 2.0, 0.0, 0.0]))
    assert result.metrics["dataflex/kept_fraction"] == 0.5
    assert result.metrics["dataflex/groups_fully_dropped"] == 1.0


def test_mix_updates_the_sampler_on_update_steps_and_observes_in_between():
    step = mount_step(
        block("steptest_reward", "steptest_prefer_first", "mix", domains=["x", "y"], update_step=2),
        HOST,
        loss_unit="token",
    )
    assert step.fields[-1] == "domain"
    sampler = DomainMixtureSampler([0, 1, 0, 1], ["x", "y"], 2, torch.tensor([0.5, 0.5]))
    step.sampler = sampler
    batch = rollout([1.0, 0.0, 1.0], [1, 1, 1], padding=[False, False, True])
    batch.non_tensor_batch["domain"] = np.asarray(["x", "y", "not-a-domain"], dtype=object)  # padding may hold anything
    PreferFirst.observed.clear()
    metrics = step.run(batch, step=1).metrics
    assert metrics["dataflex/mix/updated"] == 0.0 and PreferFirst.observed == [1]
    assert sampler.proportions.tolist() == [0.5, 0.5]
    metrics = step.run(batch, step=2).metrics
    assert metrics["dataflex/mix/updated"] == 1.0 and sampler.proportions.tolist() == [0.75, 0.25]
    assert metrics["dataflex/mix/batch_fraction/x"] == 0.5


def test_mixer_defaults_declared_on_the_base_class():
    class Plain(Mixer):
        def act(self, scores, batch, **ctx):
            return torch.tensor([1.0])

    mixer = Plain()
    assert mixer.observe(torch.zeros(1), None) is None
    torch.testing.assert_close(mixer.current_proportions(["a", "b", "c", "d"]), torch.full((4,), 0.25))
    assert Selector.recompute_advantage is False


@pytest.mark.parametrize(
    ("config", "host", "message"),
    [
        (block("steptest_values", "steptest_plus"), HOST, "field 'values', which this testhost configuration does not provide: enable the critic"),
        (block("steptest_reward", "steptest_plus") | {"scorer": {"name": "steptest_token"}},
         HostCapabilities(name="onehost", token_weights=False, fields=HOST.fields), "applies one weight per sample"),
        (block("steptest_groups", "steptest_plus"), HostCapabilities(name="shards", complete_groups=False, fields=HOST.fields),
         "needs whole GRPO groups"),
        (block("steptest_reward", "steptest_prefer_first", "mix", domains=["x"]), HostCapabilities(name="fixed", fields=HOST.fields),
         "cannot resample"),
        (block("steptest_before", "steptest_plus"), HOST, "timing='pre_rollout'"),
        (block("steptest_column", "steptest_plus"), HostCapabilities(name="nocols", dataset_columns=False, fields=HOST.fields),
         "not a canonical field"),
    ],
)  # fmt: skip
@pytest.mark.filterwarnings("ignore::dataflex_core.config.GroupsUncheckedWarning")
def test_mount_refuses_what_the_host_cannot_do(config, host, message):
    with pytest.raises(IncompatibleComponentError, match=message):
        mount_step(config, host, loss_unit="token")


def test_a_canonical_field_the_host_never_provides_is_named():
    host = HostCapabilities(name="small", fields={"response_mask": FieldSupport(True), "rm_scores": FieldSupport(True)})
    with pytest.raises(IncompatibleComponentError, match="'values', which small never provides; it provides"):
        mount_step(block("steptest_values", "steptest_plus"), host, loss_unit="token")


def test_mount_settings_errors():
    with pytest.raises(ConfigError, match="on_invalid='ignore'"):
        mount_step({**block("steptest_reward", "steptest_plus"), "on_invalid": "ignore"}, HOST, loss_unit="token")
    with pytest.raises(ConfigError, match="dataflex.domains is read only by mechanism: mix"):
        mount_step({**block("steptest_reward", "steptest_plus"), "domains": ["a"]}, HOST, loss_unit="token")
    with pytest.raises(ConfigError, match="no loss unit 'tokens'"):
        mount_step(block("steptest_reward", "steptest_plus"), HOST, loss_unit="tokens")


def test_components_get_the_loss_unit_and_the_hosts_context():
    seen = {}

    @register_reweighter("steptest_ctx")
    class Ctx(Reweighter):
        def act(self, scores, batch, **ctx):
            seen.update(ctx)
            return torch.ones(len(batch))

    step = mount_step(block("steptest_reward", "steptest_ctx"), HOST, loss_unit="token", ctx={"loss_type": "x"})
    step.run(rollout([1.0], [1]), step=4)
    assert seen == {"step_id": 4, "loss_type": "x", "loss_unit": "token"}


def test_a_mechanism_name_is_held_once_and_the_builtins_stay():
    from dataflex_core.mechanisms import LossMechanism, mechanism_names, register_mechanism, unregister_mechanism

    class Twice(LossMechanism):
        name = "reweight"
        actuator_kind = "reweighter"

    with pytest.raises(ConfigError, match="mechanism 'reweight' is already registered by dataflex_core.mechanisms"):
        register_mechanism(Twice)
    with pytest.raises(ConfigError, match="built in"):
        unregister_mechanism("select")
    assert mechanism_names()[:4] == ("reweight", "select", "mix", "curriculum")
    with pytest.raises(ConfigError, match="mechanism='filterr' is not one of reweight, select, mix, curriculum"):
        mount_step(block("steptest_reward", "steptest_plus", "filterr"), HOST, loss_unit="token")
