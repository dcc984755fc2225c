"""Calling components inside the step: their scores checked by the contract, their labels for errors.

Component output is never trusted: wrong type, wrong shape, NaN/inf or negative
values on valid units raise :class:`~dataflex_core.InvalidOutputError` naming
the plugin, its version and the step (the rules are
:mod:`dataflex_core.contracts`), before anything reaches a framework's loss.
"""

from __future__ import annotations

from typing import Any

import torch

from ..config import DataFlexPipeline
from ..contracts import check_scores


def component_label(pipeline: DataFlexPipeline, role: str) -> str:
    """``"<kind> <name> (<dist>==<version>)"`` of the scorer (``role="scorer"``) or the actuator, for errors."""
    spec = pipeline.scorer_spec if role == "scorer" else pipeline.actuator_spec
    return f"{spec.kind} {spec.label}"


def checked_scores(
    pipeline: DataFlexPipeline,
    batch: Any,
    step: int,
    ctx: dict[str, Any],
    *,
    valid: torch.Tensor | None = None,
) -> Any:
    """``scorer.score`` with the host's ``ctx``, checked at the scorer's granularity (no autograd graph).

    :param ctx: keyword context for the scorer (the step goes positionally, so no ``step_id`` here).
    :param valid: the batch's validity mask for the scorer's granularity, if already computed.
    Domain-granularity scores have no per-row shape to check; the mixer that reads them checks its output.
    """
    with torch.no_grad():
        scores = pipeline.scorer.score(batch, step, **ctx)
    if pipeline.scorer.granularity == "domain":
        return scores
    return check_scores(
        scores,
        batch,
        granularity=pipeline.scorer.granularity,
        owner=component_label(pipeline, "scorer"),
        step=step,
        valid=valid,
    )
