"""Component output inside the step: the scorer's scores checked by the contract (:mod:`dataflex_core.contracts`).

Output is never trusted: a wrong type or shape, NaN/inf or negative values on valid units raise
:class:`~dataflex_core.InvalidOutputError` naming the plugin and the step, before anything reaches a loss.
"""

from __future__ import annotations

from typing import Any

import torch

from ..contracts import check_scores
from .calls import ComponentCalls


def checked_scores(
    calls: ComponentCalls,
    batch: Any,
    step: int,
    ctx: dict[str, Any],
    *,
    valid: torch.Tensor | None = None,
) -> Any:
    """``scorer.score`` with the host's ``ctx`` (through ``calls``), checked at the scorer's granularity.

    :param ctx: keyword context for the scorer (the step goes positionally, so no ``step_id`` here).
    :param valid: the batch's validity mask for the scorer's granularity, if already computed.
    Domain-granularity scores have no per-row shape to check; the mixer that reads them checks its output.
    """
    scores = calls.call("scorer", "score", batch, step, at_step=step, **ctx)
    granularity = calls.pipeline.scorer.granularity
    if granularity == "domain":
        return scores
    return check_scores(
        scores, batch, granularity=granularity, owner=calls.label("scorer"), step=step, valid=valid
    )  # fmt: skip
