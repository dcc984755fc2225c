"""Per-mechanism runners: scorer -> actuator -> raw weights the step normalises.

Each runner takes the pipeline, the batch of real rows (framework padding
already removed), the step and the host's context, and returns raw weights:
``(n,)`` per sample or ``(n, L)`` per token. ``reweight`` returns the
reweighter's weights; ``select`` returns its kept rows as 0/1 weights, which
the step renormalises like any other weights (dropping half the batch does not
halve the step). ``mix`` and ``curriculum`` act on the sampler and write no
weights (:mod:`dataflex_core.step.mix`, :mod:`dataflex_core.step.curriculum`).

Scorers get ``ctx`` as keyword arguments; actuators get ``step_id`` too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..config import DataFlexPipeline
from ..contracts import check_selection, check_weights, expected_shape, valid_for
from ..errors import InvalidOutputError
from ..normalize import valid_sample_mask
from .outputs import checked_scores, component_label

Runner = Callable[[DataFlexPipeline, Any, int, dict[str, Any]], torch.Tensor]


def run_reweight(pipeline: DataFlexPipeline, batch: Any, step: int, ctx: dict[str, Any]) -> torch.Tensor:
    """``scorer.score`` then ``reweighter.act``; the checked weights at the scorer's granularity."""
    granularity = pipeline.scorer.granularity
    valid = valid_for(expected_shape(granularity, batch), batch)
    scores = checked_scores(pipeline, batch, step, ctx, valid=valid)
    with torch.no_grad():
        weights = pipeline.actuator.act(scores, batch, step_id=step, **ctx)
    return check_weights(
        weights, batch, granularity=granularity, owner=component_label(pipeline, "actuator"), step=step, valid=valid
    )


def run_select(pipeline: DataFlexPipeline, batch: Any, step: int, ctx: dict[str, Any]) -> torch.Tensor:
    """``scorer.score`` then ``selector.act``; float32 0/1 weights ``(bs,)`` (renormalised by the step)."""
    scores = checked_scores(pipeline, batch, step, ctx)
    with torch.no_grad():
        output = pipeline.actuator.act(scores, batch, step_id=step, **ctx)
    selector = component_label(pipeline, "actuator")
    keep = check_selection(output, batch, owner=selector, step=step)
    if not keep.any() and valid_sample_mask(batch).any():
        raise InvalidOutputError(
            f"{selector} kept no sample at step {step}; a step needs at least one kept sample "
            "(widen the selector's band/fraction, or set dataflex.on_invalid=uniform to train on all samples then)"
        )
    return keep.to(torch.float32)


#: mechanism -> runner of the mechanisms that produce loss weights.
RUNNERS: dict[str, Runner] = {"reweight": run_reweight, "select": run_select}
#: Mechanisms that write no weights (they act before rollout, through the host's sampler).
WEIGHTLESS_MECHANISMS = ("mix", "curriculum")
