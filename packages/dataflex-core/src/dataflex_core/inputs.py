"""The check every actuator runs on the scores it receives, before acting on them.

One place gives every plugin the same error, naming the actuator and the scorer to pair it with. At
``(bs, L)`` one reduction decides the common case; per-element diagnostics are built only when it fails.
"""

from __future__ import annotations

from typing import Any

import torch

from .components import SAMPLE_GRANULARITIES
from .errors import InvalidOutputError
from .normalize import valid_sample_mask, valid_token_mask

_FLOATS = (torch.float32, torch.float64)


def actuator_scores(
    scores: Any,
    batch: Any,
    *,
    owner: str,
    granularity: str,
    dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Checked ``(scores, valid)`` for an actuator's ``act``; ``scores`` itself is never modified.

    :param scores: what the scorer returned.
    :param batch: the batch the scores belong to (``response_mask``, optional ``is_padding``).
    :param owner: the actuator as error messages name it (its name or ``describe()``).
    :param granularity: ``"sample"`` (or ``"prompt"`` / ``"response"``) for ``(bs,)`` scores,
        ``"token"`` for scores shaped like ``response_mask``.
    :param dtype: cast the scores to this float dtype; by default float32 and float64 stay as
        they are and lower precisions (bf16, fp16) are upcast to float32.
    :returns: the detached scores (a new tensor only when cast) and the validity mask of
        the granularity (:func:`valid_sample_mask` / :func:`valid_token_mask`) on the scores' device.
    :raises InvalidOutputError: the scores are not a tensor of the granularity's shape, or a
        valid unit's score is NaN or infinite (invalid units may hold anything).
    """
    per_token = granularity == "token"
    if not per_token and granularity not in ("sample", *SAMPLE_GRANULARITIES):
        raise ValueError(
            f"actuator_scores: granularity must be 'sample', 'prompt', 'response' or 'token', got {granularity!r}"
        )
    valid = valid_token_mask(batch) if per_token else valid_sample_mask(batch)
    if not isinstance(scores, torch.Tensor) or scores.shape != valid.shape:
        seen = tuple(scores.shape) if isinstance(scores, torch.Tensor) else type(scores).__name__
        if per_token:
            expected, fix = f"per-token scores shaped like response_mask {tuple(valid.shape)}", "a token-granularity"
        else:
            expected, fix = f"per-sample scores of shape ({valid.shape[0]},)", "a prompt- or response-granularity"
        raise InvalidOutputError(f"{owner} takes {expected}, got {seen}; pair it with {fix} scorer")
    s = scores.detach()
    if dtype is not None:
        s = s.to(dtype)
    elif s.dtype not in _FLOATS:
        s = s.float()
    valid = valid.to(s.device)
    bad = nonfinite_mask(s, valid)
    if bad is not None:
        first = bad.nonzero()[0].tolist() if per_token else f"row {int(bad.nonzero()[0])}"
        units = "tokens" if per_token else "rows"
        raise InvalidOutputError(
            f"{owner} got {int(bad.sum())} non-finite score(s) among {int(torch.count_nonzero(valid))} valid "
            f"{units} (first at {first}); the scorer must return finite scores"
        )
    return s, valid


def nonfinite_mask(values: torch.Tensor, valid: torch.Tensor) -> torch.Tensor | None:
    """``None`` when every valid entry of ``values`` is finite, else the bool mask of the valid non-finite ones.

    A finite sum decides the common case in one reduction; only otherwise is the per-entry mask built.
    """
    if not values.is_floating_point() or torch.isfinite(values.sum()):
        return None
    bad = valid & ~torch.isfinite(values)
    return bad if bad.any() else None


def negative_mask(values: torch.Tensor, valid: torch.Tensor) -> torch.Tensor | None:
    """``None`` when no valid entry of ``values`` is negative (NaN is not negative), else the mask of those that are.

    The minimum decides the common case in one reduction; only otherwise is the per-entry mask built.
    """
    if values.dtype == torch.bool or values.numel() == 0 or bool(values.min() >= 0):  # NaN min: check exactly
        return None
    negative = valid & (values < 0)
    return negative if negative.any() else None
