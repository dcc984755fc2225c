"""Per-step ``dataflex/`` metrics, logged with the framework's own step metrics.

``dataflex/weight/mean`` is the mean in the loss's unit (over the framework's own weights' mean when it
applies importance weights), so it reads 1 when the step size is kept; the other statistics (std, min, max,
effective sample size) describe the factor DataFlex multiplies in (docs/is-it-working.md reads them).
"""

from __future__ import annotations

import numpy as np
import torch

from .result import PREFIX
from .weights import SEQUENCE_UNIT, TOKEN_UNIT, masked_unit_mean


def weight_metrics(
    factor: torch.Tensor,
    valid_tokens: torch.Tensor,
    unit: str,
    *,
    token_counts: torch.Tensor,
    applied: torch.Tensor | None = None,
    importance_weights: torch.Tensor | None = None,
) -> dict[str, float]:
    """The step's weight metrics: means in ``unit`` and over tokens, std/min/max over valid tokens, ESS.

    :param factor: the DataFlex factor, ``(bs, L)`` per token or ``(bs,)`` per sample (the weight of each of a row's
        valid tokens), 0 on invalid tokens.
    :param unit: the loss unit, ``token`` or ``sequence``.
    :param token_counts: ``(bs,)`` valid tokens per row, ``valid_tokens`` counted (the step's
        :class:`~dataflex_core.StepInputs` has them).
    :param applied: with ``importance_weights``: the ``(bs, L)`` weights applied (``factor`` times the framework's).
    :param importance_weights: the framework's own ``(bs, L)`` weights, when DataFlex composed with them.

    Masked reductions only (no boolean indexing): this runs on the whole global batch every step.
    """
    rows = token_counts > 0
    num_tokens, num_samples = int(token_counts.sum()), int(rows.sum())
    if num_tokens == 0:  # no valid token: nothing to average
        return {f"{PREFIX}valid_samples": 0.0, f"{PREFIX}valid_tokens": 0.0}
    if factor.dim() == 1:  # a row's weight on each of its valid tokens, from the counts alone
        per_sample, counts = torch.where(rows, factor.to(torch.float64), 0.0), token_counts.to(torch.float64)
        token_sum, squares_sum = (per_sample * counts).sum(), (per_sample * per_sample * counts).sum()
        inf = torch.full((), float("inf"), dtype=torch.float64)
        low, high = torch.where(rows, per_sample, inf).amin(), torch.where(rows, per_sample, -inf).amax()
    else:
        row_sum, squares_sum, low, high = _masked_row_stats(factor, valid_tokens)
        token_sum, per_sample = row_sum.sum(), torch.where(rows, row_sum / token_counts.clamp(min=1), 0.0)
    mean, second = token_sum / num_tokens, squares_sum / num_tokens
    total, squares = per_sample.sum(), (per_sample * per_sample).sum()
    ess = float(total**2 / squares) if squares > 0 else 0.0
    out = {
        f"{PREFIX}weight/factor_mean": (mean if unit == TOKEN_UNIT else total / num_samples).item(),
        f"{PREFIX}weight/token_mean": mean.item(),
        f"{PREFIX}weight/std": (second - mean * mean).clamp(min=0).sqrt().item(),
        f"{PREFIX}weight/min": low.item(),
        f"{PREFIX}weight/max": high.item(),
        f"{PREFIX}ess": ess,
        f"{PREFIX}ess_fraction": ess / num_samples,
        f"{PREFIX}zero_weight_fraction": int((rows & (per_sample == 0)).sum()) / num_samples,
        f"{PREFIX}valid_samples": float(num_samples),
        f"{PREFIX}valid_tokens": float(num_tokens),
    }
    composed = importance_weights is not None and applied is not None
    if composed:  # the mean of the applied weights over the mean of the framework's own, from their row sums (no copy)
        applied_mean, own_mean = (  # one column per row, holding the row's sum
            masked_unit_mean(_masked_row_stats(w, valid_tokens)[0][:, None], token_counts, unit)
            for w in (applied, importance_weights)
        )
        out[f"{PREFIX}weight/mean"] = (applied_mean / own_mean).item()
    else:
        out[f"{PREFIX}weight/mean"] = out[f"{PREFIX}weight/factor_mean"]
    out[f"{PREFIX}weight/unit_is_sequence"] = 1.0 if unit == SEQUENCE_UNIT else 0.0
    out[f"{PREFIX}weight/composed"] = 1.0 if composed else 0.0
    return out


#: ``(row sums (bs,) float64, sum of squares, min, max)`` over valid tokens, the last three 0-dim float64.
RowStats = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
#: Elements per row block of the CPU pass: a 2 MiB float64 buffer, held by the cache with its rows' mask.
STATS_BLOCK = 1 << 18


def _masked_row_stats(factor: torch.Tensor, valid_tokens: torch.Tensor) -> RowStats:
    """Over valid tokens: float64 row sums, the float64 sum of squares, the min and the max.

    On the CPU in numpy, one pass of row blocks through a float64 buffer the cache holds (no ``(bs, L)``
    temporary); elsewhere in one go.
    """
    cpu = factor.device.type == valid_tokens.device.type == "cpu" and factor.dtype in (torch.float32, torch.float64)
    if cpu and factor.dim() == 2 and valid_tokens.shape == factor.shape and valid_tokens.dtype == torch.bool:
        return _numpy_row_stats(factor.detach().numpy(), valid_tokens.numpy())
    zero = torch.zeros((), dtype=factor.dtype, device=factor.device)
    inf = torch.full((), float("inf"), dtype=factor.dtype, device=factor.device)
    w = torch.where(valid_tokens, factor, zero)
    return (
        w.sum(-1, dtype=torch.float64),
        (w * w).sum(dtype=torch.float64),
        torch.where(valid_tokens, factor, inf).amin(),
        torch.where(valid_tokens, factor, -inf).amax(),
    )


def _numpy_row_stats(xs: np.ndarray, ms: np.ndarray) -> RowStats:
    """:func:`_masked_row_stats` in numpy: each block of rows is copied into a float64 buffer with its invalid
    tokens 0, and every statistic is read from that buffer while it is in cache. Row sums and squares are float64
    sums of float64 values, as the whole-tensor expression computes them."""
    bs, length = xs.shape
    step = max(1, STATS_BLOCK // max(1, length))
    buffer = np.empty((min(step, bs), length), dtype=np.float64)
    row_sum = np.empty(bs, dtype=np.float64)
    squares, low, high = 0.0, np.inf, -np.inf
    for start in range(0, bs, step):
        rows = slice(start, start + step)
        block, valid = buffer[: min(step, bs - start)], ms[rows]
        block.fill(0.0)
        np.copyto(block, xs[rows], where=valid)
        np.add.reduce(block, axis=1, out=row_sum[rows])
        squares += float(np.einsum("ij,ij->", block, block))
        low = min(low, float(np.minimum.reduce(block, axis=None, where=valid, initial=np.inf)))
        high = max(high, float(np.maximum.reduce(block, axis=None, where=valid, initial=-np.inf)))
    return (
        torch.from_numpy(row_sum),
        torch.tensor(squares, dtype=torch.float64),
        torch.tensor(low, dtype=torch.float64),
        torch.tensor(high, dtype=torch.float64),
    )
