"""The finishing step the per-token reweighters share.

Scores arrive as ``(bs, L)`` tensors of any float dtype, checked for shape and
finiteness by ``dataflex_core.actuator_scores``; weights leave as
float32, zero outside the valid tokens (response tokens of non-padding rows),
mean one over the valid tokens. At (bs, L) every full-size temporary costs
about as much as copying the scores, so checks are reductions over one masked
copy, and per-element diagnostics are built only when a check fails.
"""

from __future__ import annotations

import torch

from dataflex_core import normalize_mean_one


def finish(weights: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Mean one over ``valid`` tokens, 0 elsewhere (whatever ``weights`` holds there).

    ``weights`` is a float32/float64 temporary of the caller's, zeroed and scaled in place.
    """
    return normalize_mean_one(weights, valid, inplace=True).float()
