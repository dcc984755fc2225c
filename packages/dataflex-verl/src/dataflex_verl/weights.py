"""Scores' weights -> the per-token ``rollout_is_weights`` verl's policy loss multiplies in.

verl's ``agg_loss`` divides by token or sequence *counts*, never by the sum of
the weights, so the weights' mean sets the step size. The host therefore keeps
that mean at one in the unit the active ``loss_agg_mode`` averages over:

- ``token``: ``token-mean``, ``token-sum``, ``seq-mean-token-sum``,
  ``seq-mean-token-sum-norm``: the mean over valid tokens is 1;
- ``sequence``: ``seq-mean-token-mean`` (and policy loss ``sapo``, which forces
  it): the mean over valid sequences of each sequence's token-mean is 1.

When verl's rollout correction already wrote ``rollout_is_weights``, the
DataFlex weights multiply into them and the product is scaled so that its
mean in that unit equals the mean of verl's weights alone: DataFlex moves
weight between tokens and sequences but never changes the step size verl
would have taken. Without rollout correction that target is 1.

Invalid tokens (padding rows, positions outside ``response_mask``) get 0.
"""

from __future__ import annotations

import torch

from dataflex_core import ConfigError, InvalidOutputError

TOKEN_UNIT = "token"
SEQUENCE_UNIT = "sequence"
#: ``loss_agg_mode`` -> the unit its mean is taken over.
LOSS_UNITS = {
    "token-mean": TOKEN_UNIT,
    "token-sum": TOKEN_UNIT,
    "seq-mean-token-sum": TOKEN_UNIT,
    "seq-mean-token-sum-norm": TOKEN_UNIT,
    "seq-mean-token-mean": SEQUENCE_UNIT,
}
#: Policy losses that aggregate with a fixed mode whatever ``loss_agg_mode`` says.
FORCED_AGG_MODE = {"sapo": "seq-mean-token-mean"}


def loss_unit(loss_agg_mode: str, policy_loss: str = "vanilla") -> str:
    """The unit (``token`` or ``sequence``) in which weights must have mean one."""
    mode = FORCED_AGG_MODE.get(policy_loss, loss_agg_mode)
    try:
        return LOSS_UNITS[mode]
    except KeyError:
        raise ConfigError(
            f"actor_rollout_ref.actor.loss_agg_mode={loss_agg_mode!r} is not one dataflex-verl can normalise for; "
            f"supported: {', '.join(LOSS_UNITS)}"
        ) from None


def to_token_weights(weights: torch.Tensor, valid_tokens: torch.Tensor) -> torch.Tensor:
    """``(bs,)`` per-sample or ``(bs, L)`` per-token weights -> float32 ``(bs, L)``, 0 on invalid tokens."""
    w = weights.to(torch.float32)
    if w.dim() == 1:
        w = w.unsqueeze(-1)
    return torch.where(valid_tokens, w, torch.zeros((), dtype=w.dtype, device=w.device))


def unit_mean(
    token_weights: torch.Tensor, valid_tokens: torch.Tensor, unit: str, *, masked: bool = False
) -> torch.Tensor:
    """Mean of ``token_weights`` over valid tokens (``token``) or over valid sequences (``sequence``).

    In the ``sequence`` unit a sequence counts with the token-mean of its
    weights, as ``seq-mean-token-mean`` aggregates it. ``masked=True`` says
    the weights are already 0 outside ``valid_tokens`` (saves a pass).
    """
    zero = torch.zeros((), dtype=token_weights.dtype, device=token_weights.device)
    w = token_weights if masked else torch.where(valid_tokens, token_weights, zero)
    if unit == TOKEN_UNIT:
        return w.sum() / valid_tokens.sum().clamp(min=1)
    per_seq_count = valid_tokens.sum(-1)
    per_seq = w.sum(-1) / per_seq_count.clamp(min=1)
    return per_seq.sum() / (per_seq_count > 0).sum().clamp(min=1)


def finalize_samples(weights: torch.Tensor, token_counts: torch.Tensor, unit: str) -> torch.Tensor:
    """Per-sample weights normalised in ``unit`` without expanding them to tokens.

    :param weights: ``(bs,)`` non-negative weights.
    :param token_counts: ``(bs,)`` valid tokens per row (0 for padding and empty rows).
    :returns: float32 ``(bs,)``, 0 on rows without valid tokens; broadcast to a row's valid tokens
        they have mean one in ``unit``.
    """
    rows = token_counts > 0
    w = torch.where(rows, weights.to(torch.float32), torch.zeros((), dtype=torch.float32, device=weights.device))
    if unit == TOKEN_UNIT:
        counts = token_counts.to(torch.float32)
        denominator = (w * counts).sum() / counts.sum().clamp(min=1)
    else:
        denominator = w.sum() / rows.sum().clamp(min=1)
    if not denominator > 0:
        raise InvalidOutputError("every valid token got weight 0; at least one must be positive")
    return w / denominator


def finalize(
    dataflex_weights: torch.Tensor,
    valid_tokens: torch.Tensor,
    unit: str,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``rollout_is_weights`` to write, and the DataFlex factor inside it.

    :param dataflex_weights: ``(bs,)`` or ``(bs, L)`` non-negative weights from the actuator.
    :param valid_tokens: ``(bs, L)`` bool, response tokens of non-padding rows.
    :param unit: ``token`` or ``sequence`` (see :func:`loss_unit`).
    :param rollout_is_weights: ``(bs, L)`` weights verl's rollout correction wrote, if any.
    :returns: ``(written, factor)``, float32; ``written = factor * rollout_is_weights`` (or ``factor``
        alone) with the normalisation described in the module docstring. Per-sample weights without
        rollout correction stay ``(bs,)`` (one weight for each of a row's valid tokens; cheaper to
        write); otherwise both are ``(bs, L)``.
    :raises InvalidOutputError: the weights leave no valid token with positive weight.
    """
    if dataflex_weights.dim() == 1 and rollout_is_weights is None:
        factor = finalize_samples(dataflex_weights, valid_tokens.sum(-1), unit)
        return factor, factor
    factor = to_token_weights(dataflex_weights, valid_tokens)
    if not valid_tokens.any():
        return factor, factor
    if rollout_is_weights is None:
        denominator = unit_mean(factor, valid_tokens, unit, masked=True)
        if not denominator > 0:
            raise InvalidOutputError("every valid token got weight 0; at least one must be positive")
        factor = factor / denominator
        return factor, factor
    base = rollout_is_weights.to(torch.float32)
    product = factor * base
    target = unit_mean(base, valid_tokens, unit)
    denominator = unit_mean(product, valid_tokens, unit, masked=True)
    if not denominator > 0:
        if target > 0:
            raise InvalidOutputError(
                "the dataflex weights are 0 wherever verl's rollout_is_weights are positive, so the product "
                "leaves no valid token with positive weight"
            )
        return product, factor
    scale = target / denominator
    return product * scale, factor * scale
