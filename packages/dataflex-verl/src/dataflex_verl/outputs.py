"""Component output, never trusted: the checks every mechanism runs on scores and weights.

Shared by the runners of :mod:`dataflex_verl.mechanisms` and
:mod:`dataflex_verl.select`, so it imports neither. Wrong shape, wrong type,
NaN/inf or negative values on valid units raise :class:`InvalidOutputError`
naming the plugin, its version and the step.
"""

from __future__ import annotations

from typing import Any

import torch

from dataflex_core import Batch, DataFlexPipeline, InvalidOutputError, valid_sample_mask, valid_token_mask
from dataflex_core.components import SAMPLE_GRANULARITIES


def expected_shape(granularity: str, batch: Batch) -> tuple[int, ...]:
    mask = batch.batch["response_mask"]
    return (mask.shape[0],) if granularity in SAMPLE_GRANULARITIES else tuple(mask.shape)


def valid_for(shape: tuple[int, ...], batch: Batch) -> torch.Tensor:
    """The batch's validity mask for output of ``shape``: per sample ``(bs,)`` or per token ``(bs, L)``."""
    return valid_sample_mask(batch) if len(shape) == 1 else valid_token_mask(batch)


def check_output(
    value: Any,
    *,
    what: str,
    owner: str,
    step: int,
    granularity: str,
    batch: Batch,
    non_negative: bool,
    valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """Return ``value`` if it honours the contract on valid units, else raise naming ``owner`` and ``step``.

    :param valid: the batch's validity mask for this granularity, if already computed.
    """

    def fail(problem: str) -> InvalidOutputError:
        return InvalidOutputError(f"{owner} returned invalid {what} at step {step}: {problem}")

    if not isinstance(value, torch.Tensor):
        raise fail(f"expected a torch.Tensor, got {type(value).__name__}")
    shape = expected_shape(granularity, batch)
    if tuple(value.shape) != shape:
        raise fail(f"shape {tuple(value.shape)}, but {granularity} granularity on this batch needs {shape}")
    if not (value.is_floating_point() or value.dtype in (torch.int32, torch.int64, torch.bool)):
        raise fail(f"dtype {value.dtype} is not numeric")
    valid = (valid_for(shape, batch) if valid is None else valid).to(value.device)
    if value.is_floating_point():
        bad = valid & ~torch.isfinite(value)
        if bad.any():
            raise fail(f"{int(bad.sum())} of {int(valid.sum())} valid entries are NaN or inf")
    if non_negative:
        negative = valid & (value < 0)
        if negative.any():
            raise fail(f"{int(negative.sum())} valid entries are negative (min {value[negative].min().item():.4g})")
    return value


def step_context(mounted: Any, step: int) -> dict[str, Any]:
    """The ctx keyword arguments the host passes to actuators (scorers get the same without ``step_id``)."""
    return {
        "step_id": step,
        "loss_agg_mode": mounted.loss_agg_mode,
        "adv_estimator": mounted.adv_estimator,
    }


def component_label(pipeline: DataFlexPipeline, role: str) -> str:
    """``"<kind> <name> (<dist>==<version>)"`` of the scorer (``role="scorer"``) or the actuator, for errors."""
    spec = pipeline.scorer_spec if role == "scorer" else pipeline.actuator_spec
    return f"{spec.kind} {spec.label}"


def checked_scores(
    mounted: Any,
    batch: Batch,
    step: int,
    *,
    valid: torch.Tensor | None = None,
    extra_ctx: dict[str, Any] | None = None,
) -> torch.Tensor:
    """``scorer.score`` with the host's context, checked at the scorer's granularity (no autograd graph).

    :param valid: the batch's validity mask for the scorer's granularity, if already computed.
    :param extra_ctx: mechanism-specific context added to the host's (e.g. ``domains`` for mix).
    Domain-granularity scores have no per-row shape to check; the mixer that reads them checks its output.
    """
    pipeline: DataFlexPipeline = mounted.pipeline
    ctx = {**step_context(mounted, step), **(extra_ctx or {})}
    del ctx["step_id"]  # the scorer takes the step positionally
    with torch.no_grad():
        scores = pipeline.scorer.score(batch, step, **ctx)
    if pipeline.scorer.granularity == "domain":
        return scores
    return check_output(
        scores,
        what="scores",
        owner=component_label(pipeline, "scorer"),
        step=step,
        granularity=pipeline.scorer.granularity,
        batch=batch,
        non_negative=False,
        valid=valid,
    )
