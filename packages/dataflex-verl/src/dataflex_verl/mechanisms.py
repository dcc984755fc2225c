"""Per-mechanism runners: scorer -> actuator -> weights the host can write.

Each runner takes the pipeline and the batch of non-padding rows and returns
raw weights, ``(n,)`` per sample or ``(n, L)`` per token; the host turns them
into normalised ``rollout_is_weights`` (see :mod:`dataflex_verl.weights`).
``reweight`` returns the actuator's weights; ``select`` returns its 0/1 keep
mask as weights (:mod:`dataflex_verl.select`). A new mechanism adds its runner
to :data:`RUNNERS` and mount-time validation accepts it.

Component output is checked and never trusted (:mod:`dataflex_verl.outputs`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from dataflex_core import Batch, DataFlexPipeline

from .outputs import check_output, checked_scores, component_label, expected_shape, step_context, valid_for
from .select import run_select

__all__ = ["RUNNERS", "WEIGHTLESS_MECHANISMS", "check_output", "run_reweight"]


def run_reweight(mounted: Any, batch: Batch, step: int) -> torch.Tensor:
    """``scorer.score`` then ``reweighter.act``; the checked weights at the scorer's granularity."""
    pipeline: DataFlexPipeline = mounted.pipeline
    granularity = pipeline.scorer.granularity
    valid = valid_for(expected_shape(granularity, batch), batch)
    scores = checked_scores(mounted, batch, step, valid=valid)
    with torch.no_grad():
        weights = pipeline.actuator.act(scores, batch, **step_context(mounted, step))
    return check_output(
        weights,
        what="weights",
        owner=component_label(pipeline, "actuator"),
        step=step,
        granularity=granularity,
        batch=batch,
        non_negative=True,
        valid=valid,
    )


#: mechanism name -> runner. ``select`` returns 0/1 weights (:mod:`dataflex_verl.select`); ``mix`` acts on the
#: sampler before rollout and writes no weights (:mod:`dataflex_verl.mix`).
RUNNERS: dict[str, Callable[[Any, Batch, int], torch.Tensor]] = {"reweight": run_reweight, "select": run_select}
#: Mechanisms that write no weights and are handled by their own step hook.
WEIGHTLESS_MECHANISMS = ("mix",)
