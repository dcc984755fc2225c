"""The reweight suite: what ``mechanism: reweight`` owes a user on every host with the loss-weights seam."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from dataflex_core import ConfigError, InvalidOutputError
from dataflex_core.contracts import MEAN_ONE_TOLERANCE
from dataflex_core.lock import PluginSetMismatch, read_lock, write_lock
from dataflex_core.lock.file import DistRecord
from dataflex_core.lock.pinning import CHECKPOINT_PLUGIN_SET
from dataflex_core.session import LossWeights
from dataflex_core.step import unit_mean
from dataflex_core.step.state import CHECKPOINT_STATE

from .components import BLOCKS, ELSEWHERE
from .measures import applied, assert_frameworks_loss, close, valid_tokens
from .suite import SeamSuite


class ReweightSuite(SeamSuite):
    """``mechanism: reweight`` on a host with the loss-weights seam; each test below is one promise."""

    seam = LossWeights

    def test_uniform_weights_leave_the_frameworks_loss_unchanged(self, host, plain):
        flex = host.step(BLOCKS["uniform"])
        assert flex.metrics.get("dataflex/active") == 1.0, flex.metrics
        assert_frameworks_loss(flex, plain)

    def test_weights_that_differ_change_the_loss_and_keep_its_step_size(self, host, plain):
        flex = host.step(BLOCKS["weights"])
        weights, valid = applied(flex), valid_tokens(flex)
        assert weights[valid].std() > 1e-3, "the batch's advantages must differ between rows for this test"
        assert not close(flex.loss, plain.loss), "weights that differ between rows did not change the loss"
        mean = unit_mean(weights, valid, flex.loss_unit).item()
        assert abs(mean - 1.0) <= MEAN_ONE_TOLERANCE, f"weights have mean {mean} per {flex.loss_unit}, not one"

    def test_padding_rows_and_empty_responses_get_weight_zero(self, host, plain):
        flex = host.step(BLOCKS["weights"])
        weights = applied(flex)
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
        assert_frameworks_loss(flex, plain)

    def test_before_warmup_step_the_framework_trains_alone(self, host, plain):
        flex = host.step(BLOCKS["warmup"])
        assert flex.metrics.get("dataflex/active") == 0.0, flex.metrics
        assert_frameworks_loss(flex, plain)

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
