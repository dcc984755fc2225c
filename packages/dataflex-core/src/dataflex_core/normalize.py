"""Validity masks and mean-one normalisation.

verl's loss aggregation divides by token or sequence counts, not by the sum of the weights, so the mean of the weights
sets the step size. Weights are therefore scaled to mean one over the valid units: valid samples for ``(bs,)`` weights,
valid tokens of non-padding rows for ``(bs, L)`` weights.
"""

from __future__ import annotations

from typing import Any

import torch

from .errors import InvalidOutputError
from .precomputed import count_set, inputs_of

# Each mask below is the batch's StepInputs' (computed once per step when the host prepared the batch,
# shared by every caller: treat it as read-only), else computed for this call.


def valid_token_mask(batch: Any) -> torch.Tensor:
    """``(bs, L)`` bool: response tokens of non-padding rows."""
    return inputs_of(batch).valid_tokens


def valid_sample_mask(batch: Any) -> torch.Tensor:
    """``(bs,)`` bool: rows that are not padding and have at least one response token."""
    return inputs_of(batch).valid_rows


def valid_token_counts(batch: Any) -> torch.Tensor:
    """``(bs,)`` int64: valid tokens per row (0 on padding and empty rows)."""
    return inputs_of(batch).token_counts


def response_token_mask(batch: Any) -> torch.Tensor:
    """``(bs, L)`` bool ``response_mask``, padding rows included (for scores that zero non-response positions)."""
    return inputs_of(batch).response_tokens


def valid_mask_for(weights: torch.Tensor, batch: Any) -> torch.Tensor:
    """The validity mask matching ``weights``' shape: per sample or per token."""
    return valid_sample_mask(batch) if weights.dim() == 1 else valid_token_mask(batch)


def normalize_mean_one(weights: torch.Tensor, valid: torch.Tensor, *, inplace: bool = False) -> torch.Tensor:
    """Scale ``weights`` to mean one over ``valid`` entries; invalid entries become 0.

    :param weights: ``(bs,)`` or ``(bs, L)`` non-negative weights, any float dtype.
    :param valid: bool mask of the same shape.
    :param inplace: when ``weights`` is already float32/float64 and the caller owns it (a temporary it built), zero and
        scale it in place instead of copying: one full-size allocation less on ``(bs, L)`` token weights.
    :returns: float32 weights (float64 stays float64).
    :raises InvalidOutputError: a valid weight is negative or non-finite, or all are zero.
    """
    if weights.shape != valid.shape:
        raise InvalidOutputError(
            f"weights shape {tuple(weights.shape)} does not match the validity mask {tuple(valid.shape)}"
        )
    dtype = torch.float64 if weights.dtype == torch.float64 else torch.float32
    w = weights.to(dtype)
    valid = valid.to(w.device).bool()
    count = torch.tensor(count_set(valid), dtype=dtype, device=w.device)
    if count == 0:
        return torch.zeros_like(w)
    zero = torch.zeros((), dtype=dtype, device=w.device)
    # our own tensor (the dtype copy) or the caller's to give: zeroed and scaled in place
    w = torch.where(valid, w, zero, out=w) if w is not weights or inplace else torch.where(valid, w, zero)
    total, low = w.sum(), w.min()
    if torch.isfinite(total) and low >= 0 and total > 0:
        return w.mul_(count / total)
    bad = valid & ~torch.isfinite(w)
    if bad.any():
        raise InvalidOutputError(
            f"{int(bad.sum())} of {int(valid.sum())} valid weights are not finite "
            f"(first at index {bad.nonzero()[0].tolist()})"
        )
    if (w < 0).any():
        raise InvalidOutputError(
            f"weights must be non-negative; min={w.min().item():.4g} at index {(w < 0).nonzero()[0].tolist()}"
        )
    if total <= 0:
        raise InvalidOutputError(
            f"all {int(count)} valid weights are zero; at least one must be positive to normalise to mean one"
        )
    if not torch.isfinite(total):
        # The sum overflowed although every entry is finite: rescale first.
        w = w / w.max()
        total = w.sum()
    return w * (count / total)


def mean_one(weights: torch.Tensor, batch: Any) -> torch.Tensor:
    """:func:`normalize_mean_one` over the units of ``batch`` that match ``weights``' shape."""
    return normalize_mean_one(weights, valid_mask_for(weights, batch))
