"""Per-mechanism runners: scorer -> actuator -> weights the host can write.

Each runner takes the pipeline and the batch of non-padding rows and returns
raw weights, ``(n,)`` per sample or ``(n, L)`` per token; the host turns them
into normalised ``rollout_is_weights`` (see :mod:`dataflex_verl.weights`).
``reweight`` returns the actuator's weights. A ``select`` runner would return
its 0/1 keep mask as weights and a ``mix`` runner would act before rollout;
add them to :data:`RUNNERS` and mount-time validation accepts the mechanism.

Component output is checked here and never trusted: wrong shape, wrong type,
NaN/inf or negative values on valid units raise :class:`InvalidOutputError`
naming the plugin, its version and the step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from dataflex_core import Batch, DataFlexPipeline, InvalidOutputError, valid_sample_mask, valid_token_mask
from dataflex_core.components import SAMPLE_GRANULARITIES

from .select import run_select


def expected_shape(granularity: str, batch: Batch) -> tuple[int, ...]:
    mask = batch.batch["response_mask"]
    return (mask.shape[0],) if granularity in SAMPLE_GRANULARITIES else tuple(mask.shape)


def _valid_for(shape: tuple[int, ...], batch: Batch) -> torch.Tensor:
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
    valid = (_valid_for(shape, batch) if valid is None else valid).to(value.device)
    if value.is_floating_point():
        bad = valid & ~torch.isfinite(value)
        if bad.any():
            raise fail(f"{int(bad.sum())} of {int(valid.sum())} valid entries are NaN or inf")
    if non_negative:
        negative = valid & (value < 0)
        if negative.any():
            raise fail(f"{int(negative.sum())} valid entries are negative (min {value[negative].min().item():.4g})")
    return value


def _context(mounted: Any, step: int) -> dict[str, Any]:
    return {
        "step_id": step,
        "loss_agg_mode": mounted.loss_agg_mode,
        "adv_estimator": mounted.adv_estimator,
    }


def _label(pipeline: DataFlexPipeline, role: str) -> str:
    spec = pipeline.scorer_spec if role == "scorer" else pipeline.actuator_spec
    return f"{spec.kind} {spec.label}"


def run_reweight(mounted: Any, batch: Batch, step: int) -> torch.Tensor:
    """``scorer.score`` then ``reweighter.act``; the checked weights at the scorer's granularity."""
    pipeline: DataFlexPipeline = mounted.pipeline
    ctx = _context(mounted, step)
    granularity = pipeline.scorer.granularity
    valid = _valid_for(expected_shape(granularity, batch), batch)
    with torch.no_grad():
        scores = pipeline.scorer.score(batch, step, **{k: v for k, v in ctx.items() if k != "step_id"})
        scores = check_output(
            scores,
            what="scores",
            owner=_label(pipeline, "scorer"),
            step=step,
            granularity=granularity,
            batch=batch,
            non_negative=False,
            valid=valid,
        )
        weights = pipeline.actuator.act(scores, batch, **ctx)
        return check_output(
            weights,
            what="weights",
            owner=_label(pipeline, "actuator"),
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
