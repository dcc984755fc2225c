"""The select suite: what ``mechanism: select`` owes a user on every host with the loss-weights seam.

A selector's kept rows count in the loss and its dropped rows do not, the step size kept: on every host the
dropped rows weigh 0 and the kept rows share one weight (mean one in the loss's unit), or, where the host
hard-drops, leave its loss mask (:attr:`~dataflex_conformance.host.HostStep.trained_mask`).
"""

from __future__ import annotations

from dataflex_core.contracts import MEAN_ONE_TOLERANCE
from dataflex_core.session import LossWeights
from dataflex_core.step import unit_mean

from .components import BLOCKS
from .measures import applied, assert_frameworks_loss, close, kept_rows, valid_tokens
from .suite import SeamSuite


class SelectSuite(SeamSuite):
    """``mechanism: select`` (kept rows as 0/1 weights, renormalised) on a host with the loss-weights seam."""

    seam = LossWeights

    def test_a_selection_keeping_every_row_leaves_the_frameworks_loss(self, host, plain):
        flex = host.step(BLOCKS["select_all"])
        assert flex.metrics.get("dataflex/kept_fraction") == 1.0, flex.metrics
        assert_frameworks_loss(flex, plain)

    def test_dropped_rows_leave_the_loss_and_kept_rows_share_one_weight(self, host, plain):
        flex = host.step(BLOCKS["select_some"])
        weights, rows, kept = kept_rows(flex)
        dropped = rows & ~kept
        assert kept.any() and dropped.any(), (
            f"the selector kept {int(kept.sum())} of {int(rows.sum())} valid rows; the harness's batch must have "
            "responses whose mean |advantage| differs"
        )
        fraction = float(kept.sum()) / float(rows.sum())
        assert abs(flex.metrics["dataflex/kept_fraction"] - fraction) < 1e-6, (flex.metrics, fraction)
        mask = valid_tokens(flex) & kept.unsqueeze(-1)
        if flex.trained_mask is not None:
            mask &= flex.trained_mask.bool()
        on_kept = weights[mask]
        assert close(on_kept, on_kept[:1].expand_as(on_kept)), "the kept rows' tokens weigh differently"
        assert not close(flex.loss, plain.loss), "dropping rows did not change the loss"

    def test_a_selection_keeps_the_step_size(self, host, plain):
        flex = host.step(BLOCKS["select_some"])
        if flex.trained_mask is not None:  # a hard drop: the loss recounts what is left
            return
        mean = unit_mean(applied(flex), valid_tokens(flex), flex.loss_unit).item()
        assert abs(mean - 1.0) <= MEAN_ONE_TOLERANCE, f"selection weights have mean {mean} per {flex.loss_unit}"
