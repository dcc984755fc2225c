"""Checks and the finishing step the per-token reweighters share.

Scores arrive as ``(bs, L)`` tensors of any float dtype; weights leave as
float32, zero outside the valid tokens (response tokens of non-padding rows),
mean one over the valid tokens. At (bs, L) every full-size temporary costs
about as much as copying the scores, so checks are reductions over one masked
copy, and per-element diagnostics are built only when a check fails.
"""

from __future__ import annotations

import torch

from dataflex_core import normalize_mean_one, valid_token_mask


def token_scores(name: str, scores: torch.Tensor, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """``(scores as float32/float64, valid tokens)``; the scores may be the caller's tensor, never modify them.

    :raises ValueError: scores are not shaped like ``response_mask``, or a valid token's score is NaN/inf.
    """
    valid = valid_token_mask(batch)
    if tuple(scores.shape) != tuple(valid.shape):
        raise ValueError(
            f"{name} takes per-token scores shaped like response_mask {tuple(valid.shape)}, got "
            f"{tuple(scores.shape)}; pair it with a token-granularity scorer such as token_prob or token_entropy"
        )
    s = scores.detach()
    s = s if s.dtype in (torch.float32, torch.float64) else s.float()
    valid = valid.to(s.device)
    # One reduction decides the common case; NaN/inf on invalid tokens (allowed) or an
    # overflowing sum of finite values sends us to the exact per-token check.
    if not torch.isfinite(s.sum()):
        bad = valid & ~torch.isfinite(s)
        if bad.any():
            raise ValueError(
                f"{name} got {int(bad.sum())} non-finite score(s) among {int(valid.sum())} valid tokens "
                f"(first at {bad.nonzero()[0].tolist()}); the scorer must return finite scores"
            )
    return s, valid


def finish(weights: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Mean one over ``valid`` tokens, 0 elsewhere (whatever ``weights`` holds there).

    ``weights`` is a float32/float64 temporary of the caller's, zeroed and scaled in place.
    """
    return normalize_mean_one(weights, valid, inplace=True).float()
