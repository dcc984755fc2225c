"""The select suites of hosts that act on a selector's kept rows beyond weighing them: what a GFPO-like selector
(``recompute_advantage``) owes a user.

- **recompute** (``HostCapabilities.recompute_advantage``): the kept rows' advantages are the framework's own
  estimator on the kept rows alone, and the kept rows are otherwise as the framework built them;
- **hard drop** (``HostCapabilities.hard_drop``): the dropped rows leave the loss mask, and the step's loss is
  the framework's loss on a batch of the kept rows alone (the dropped rows have no effect on it).
"""

from __future__ import annotations

import torch

from dataflex_core.session import LossWeights

from .components import BLOCKS
from .harness import HostStep
from .measures import close, kept_rows, per_token, valid_tokens
from .suite import SeamSuite


def _selection(flex: HostStep, plain: HostStep) -> tuple[torch.Tensor, torch.Tensor]:
    """``(kept, dropped)`` valid rows of a step of ``select_recompute``, asserting it kept some and dropped some."""
    _, rows, kept = kept_rows(flex)
    assert torch.equal(flex.loss_mask.bool(), plain.loss_mask.bool()), (
        "HostStep.loss_mask must be the loss mask as the framework built it, before DataFlex (a hard drop's goes "
        "in HostStep.trained_mask)"
    )
    dropped = rows & ~kept
    assert kept.any() and dropped.any(), (
        f"hostkit_two_per_group kept {int(kept.sum())} of {int(rows.sum())} valid rows; the harness's batch needs "
        "groups of more than two valid rows"
    )
    return kept, dropped


class RecomputeSuite(SeamSuite):
    """A selector asking for advantages on its kept rows, on a host that recomputes them."""

    seam = LossWeights
    needs = (
        "recomputes no advantages on a selector's kept rows (HostCapabilities.recompute_advantage)",
        lambda caps: caps.recompute_advantage,
    )

    def test_kept_rows_get_the_frameworks_advantages_computed_on_them_alone(self, host, plain):
        flex = host.step(BLOCKS["select_recompute"])
        assert flex.metrics.get("dataflex/advantage_recomputed") == 1.0, flex.metrics
        assert flex.advantages is not None and plain.advantages is not None, "the harness reports no advantages"
        kept, _ = _selection(flex, plain)
        rows = kept.nonzero().flatten()
        mask = valid_tokens(flex)[rows]
        got = per_token(flex.advantages, flex.loss_mask)[rows][mask]
        expected = per_token(host.advantages_alone(plain, rows), mask)[mask]
        assert torch.allclose(got, expected, rtol=1e-5, atol=1e-6), (
            f"the kept rows' advantages differ from the framework's estimator on them alone by "
            f"{(got - expected).abs().max().item():.3g}"
        )
        full = per_token(plain.advantages, plain.loss_mask)[rows][mask]
        assert not close(got, full), "the kept rows kept the whole batch's advantages: nothing was recomputed"

    def test_kept_rows_are_otherwise_as_the_framework_built_them(self, host, plain):
        flex = host.step(BLOCKS["select_recompute"])
        kept, _ = _selection(flex, plain)
        assert not flex.inert[kept].any(), "a kept row is a padding row or an empty response"
        if flex.trained_mask is not None:  # a hard drop leaves the kept rows' tokens in the loss, every one
            assert torch.equal(flex.trained_mask.bool()[kept], plain.loss_mask.bool()[kept])


class HardDropSuite(SeamSuite):
    """A selector asking for advantages on its kept rows, on a host that removes the dropped rows from its loss."""

    seam = LossWeights
    needs = ("cannot remove rows from its loss (HostCapabilities.hard_drop)", lambda caps: caps.hard_drop)

    def test_dropped_rows_leave_the_loss_mask_and_have_no_effect_on_the_loss(self, host, plain):
        flex = host.step(BLOCKS["select_recompute"])
        assert flex.metrics.get("dataflex/hard_drop") == 1.0, flex.metrics
        assert flex.trained_mask is not None, "a hard drop must report the loss mask it left (HostStep.trained_mask)"
        kept, dropped = _selection(flex, plain)
        assert not flex.trained_mask.bool()[dropped].any(), "a dropped row still has tokens in the loss mask"
        expected = host.loss_alone(plain, kept.nonzero().flatten())
        assert torch.allclose(flex.loss.double(), expected.double(), rtol=1e-5, atol=1e-7), (
            f"the step's loss {flex.loss.item()} is not the framework's loss on the kept rows alone {expected.item()}"
        )
