"""Raw component weights -> the weights a framework's loss multiplies in, mean one in the loss's unit.

The loss divides by token or sequence counts, never by the weights' sum, so the weights' mean sets the step
size: it stays one per valid ``token`` or ``sequence`` (the units are in docs/concepts.md), and with the
framework's importance weights the product keeps their mean. Invalid tokens get 0. Weights whose float32 sum
overflows are first divided by their largest, so an overflow never zeroes a step.
"""

from __future__ import annotations

import math

import torch

from ..errors import InvalidOutputError
from ..precomputed import row_counts

TOKEN_UNIT = "token"
SEQUENCE_UNIT = "sequence"
#: The units a loss can average over.
LOSS_UNITS = (TOKEN_UNIT, SEQUENCE_UNIT)


#: float32's smallest normal and largest finite value: a scale outside them is applied in float64.
_FLOAT32 = torch.finfo(torch.float32)


def _divide_(weights: torch.Tensor, denominator: float) -> torch.Tensor:
    """``weights / denominator`` in place on our own tensor, float32 out; exact where the denominator is
    outside float32's range (the division then goes through float64)."""
    if weights.dtype == torch.float32 and _FLOAT32.tiny <= denominator <= _FLOAT32.max:
        return weights.div_(denominator)
    return weights.to(torch.float64).div_(denominator).to(torch.float32)


def to_token_weights(weights: torch.Tensor, valid_tokens: torch.Tensor) -> torch.Tensor:
    """``(bs,)`` per-sample or ``(bs, L)`` per-token weights -> ``(bs, L)``, 0 on invalid tokens; float32 (float64
    stays float64 until normalised, so values beyond float32's range survive)."""
    # float32 and float64 weights as they are; lower precisions, integers and bools as float32
    w = weights if weights.dtype in (torch.float32, torch.float64) else weights.to(torch.float32)
    if w.dim() == 1:
        w = w.unsqueeze(-1)
    return torch.where(valid_tokens, w, torch.zeros((), dtype=w.dtype, device=w.device))


def unit_mean(
    token_weights: torch.Tensor, valid_tokens: torch.Tensor, unit: str, *, masked: bool = False
) -> torch.Tensor:
    """Mean of ``token_weights`` over valid tokens (``token``) or over valid sequences (``sequence``), for weights
    measured on their own; ``masked=True``: they are already 0 outside ``valid_tokens``."""
    zero = torch.zeros((), dtype=token_weights.dtype, device=token_weights.device)
    w = token_weights if masked else torch.where(valid_tokens, token_weights, zero)
    return masked_unit_mean(w, row_counts(valid_tokens), unit)


def masked_unit_mean(token_weights: torch.Tensor, token_counts: torch.Tensor, unit: str) -> torch.Tensor:
    """:func:`unit_mean` of ``(bs, L)`` weights already 0 outside the valid tokens.

    In the ``sequence`` unit a sequence counts with the token-mean of its
    weights, as a sequence-mean-of-token-means loss aggregates it.

    :param token_counts: ``(bs,)`` valid tokens per row (0 for padding and empty rows).
    """
    if unit == TOKEN_UNIT:
        return token_weights.sum() / token_counts.sum().clamp(min=1)
    per_seq = token_weights.sum(-1) / token_counts.clamp(min=1)
    return per_seq.sum() / (token_counts > 0).sum().clamp(min=1)


def _own_unit_mean(factor: torch.Tensor, token_counts: torch.Tensor, unit: str) -> tuple[torch.Tensor, float]:
    """``(factor, its unit mean)`` for our own masked factor; one whose sum overflows is divided by its largest
    value first (in place), which the normalised weights do not depend on."""
    mean = float(masked_unit_mean(factor, token_counts, unit))
    if math.isinf(mean):
        factor = factor.div_(factor.max())  # finite and positive: the contract checked it, the sum overflowed
        mean = float(masked_unit_mean(factor, token_counts, unit))
    return factor, mean


def finalize_samples(weights: torch.Tensor, token_counts: torch.Tensor, unit: str) -> torch.Tensor:
    """Per-sample weights normalised in ``unit`` without expanding them to tokens.

    :param weights: ``(bs,)`` non-negative weights.
    :param token_counts: ``(bs,)`` valid tokens per row (0 for padding and empty rows).
    :returns: float32 ``(bs,)``, 0 on rows without valid tokens; broadcast to a row's valid tokens
        they have mean one in ``unit``.
    """
    rows = token_counts > 0
    w = torch.where(rows, weights.to(torch.float64), torch.zeros((), dtype=torch.float64, device=weights.device))
    if unit == TOKEN_UNIT:  # each row's weight counts once per valid token
        counts = token_counts.to(torch.float64)
        denominator = (w * counts).sum() / counts.sum().clamp(min=1)
    else:
        denominator = w.sum() / rows.sum().clamp(min=1)
    if not denominator > 0:
        raise InvalidOutputError("every valid token got weight 0; at least one must be positive")
    return (w / denominator).to(torch.float32)


def finalize(
    dataflex_weights: torch.Tensor,
    valid_tokens: torch.Tensor,
    unit: str,
    importance_weights: torch.Tensor | None = None,
    *,
    token_counts: torch.Tensor,
    owner: str | None = None,
    step: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The weights to apply, and the DataFlex factor inside them.

    :param dataflex_weights: ``(bs,)`` or ``(bs, L)`` non-negative weights from the actuator.
    :param valid_tokens: ``(bs, L)`` bool, response tokens of non-padding rows.
    :param unit: ``token`` or ``sequence``.
    :param importance_weights: ``(bs, L)`` weights the framework already applies, if any.
    :param token_counts: ``(bs,)`` valid tokens per row, ``valid_tokens`` counted (the step's
        :class:`~dataflex_core.StepInputs` has them).
    :param owner: the component that returned the weights (``"reweighter name (dist==version)"``) and :param step: the
        step, named in the error; without an owner the error states the problem alone.
    :returns: ``(applied, factor)``, float32; ``applied = factor * importance_weights`` (or ``factor`` alone) with the
        normalisation described in the module docstring. Per-sample weights without importance weights stay ``(bs,)``
        (one weight for each of a row's valid tokens); otherwise both are ``(bs, L)``.
    :raises InvalidOutputError: the weights leave no valid token with positive weight, or the product with the
        framework's weights is not finite.
    """
    if unit not in LOSS_UNITS:
        raise ValueError(f"unit must be one of {', '.join(LOSS_UNITS)}, got {unit!r}")
    try:
        if dataflex_weights.dim() == 1 and importance_weights is None:
            factor = finalize_samples(dataflex_weights, token_counts, unit)
            return factor, factor
        factor = to_token_weights(dataflex_weights, valid_tokens)
        if not bool(token_counts.sum()):
            factor = factor.to(torch.float32)
            return factor, factor
        factor, denominator = _own_unit_mean(factor, token_counts, unit)  # our own tensor
        if not denominator > 0:
            raise InvalidOutputError("every valid token got weight 0; at least one must be positive")
        # Mean one over non-negative weights: each is at most the number of valid tokens, so finite.
        factor = _divide_(factor, denominator)
        if importance_weights is None:
            return factor, factor
        base = importance_weights.to(torch.float32)
        product = factor * base
        target = float(masked_unit_mean(torch.where(valid_tokens, base, 0.0), token_counts, unit))
        product, denominator = _own_unit_mean(product, token_counts, unit)  # factor is 0 off valid tokens
        if math.isnan(denominator):  # the framework's weights hold inf or NaN (an overflowing sum was rescaled)
            raise InvalidOutputError("the normalised weights are not finite (weights too extreme to scale to mean one)")
        if not denominator > 0:
            if target > 0:
                raise InvalidOutputError(
                    "the dataflex weights are 0 wherever the framework's importance weights are positive, so the "
                    "product leaves no valid token with positive weight"
                )
            return product, factor
        if not target > 0:  # the framework's own weights have no positive mean to keep
            return product, factor
        scale = denominator / target
        return _divide_(product, scale), _divide_(factor, scale)
    except InvalidOutputError as exc:
        if owner is None:
            raise
        raise InvalidOutputError(f"{owner} returned invalid weights at step {step}: {exc}") from exc
