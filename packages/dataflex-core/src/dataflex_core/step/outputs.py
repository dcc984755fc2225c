"""Component output, never trusted: the checks the step runs on scores and weights.

Wrong type, wrong shape, NaN/inf or negative values on valid units raise
:class:`~dataflex_core.InvalidOutputError` naming the plugin, its version and
the step, before anything reaches a framework's loss.
"""

from __future__ import annotations

from typing import Any

import torch

from ..components import SAMPLE_GRANULARITIES
from ..config import DataFlexPipeline
from ..errors import InvalidOutputError
from ..inputs import negative_mask, nonfinite_mask
from ..normalize import valid_sample_mask, valid_token_mask


def expected_shape(granularity: str, batch: Any) -> tuple[int, ...]:
    """``(bs,)`` for per-sample granularities, ``response_mask``'s shape for ``token``."""
    mask = batch.batch["response_mask"]
    return (mask.shape[0],) if granularity in SAMPLE_GRANULARITIES else tuple(mask.shape)


def valid_for(shape: tuple[int, ...], batch: Any) -> torch.Tensor:
    """The batch's validity mask for output of ``shape``: per sample ``(bs,)`` or per token ``(bs, L)``."""
    return valid_sample_mask(batch) if len(shape) == 1 else valid_token_mask(batch)


def component_label(pipeline: DataFlexPipeline, role: str) -> str:
    """``"<kind> <name> (<dist>==<version>)"`` of the scorer (``role="scorer"``) or the actuator, for errors."""
    spec = pipeline.scorer_spec if role == "scorer" else pipeline.actuator_spec
    return f"{spec.kind} {spec.label}"


def check_output(
    value: Any,
    *,
    what: str,
    owner: str,
    step: int,
    granularity: str,
    batch: Any,
    non_negative: bool,
    valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """Return ``value`` if it honours the contract on valid units, else raise naming ``owner`` and ``step``.

    :param what: ``"scores"`` or ``"weights"``, for the message.
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
    # One reduction each on the common path; the per-entry masks are built only to describe a failure.
    bad = nonfinite_mask(value, valid)
    if bad is not None:
        raise fail(f"{int(bad.sum())} of {int(torch.count_nonzero(valid))} valid entries are NaN or inf")
    if non_negative:
        negative = negative_mask(value, valid)
        if negative is not None:
            raise fail(f"{int(negative.sum())} valid entries are negative (min {value[negative].min().item():.4g})")
    return value


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
