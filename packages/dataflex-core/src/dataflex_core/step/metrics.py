"""Per-step ``dataflex/`` metrics, logged with the framework's own step metrics.

Statistics describe the DataFlex factor (the weights DataFlex multiplied into
the loss), over valid tokens. A sample's weight is the token-mean of its
weights; the effective sample size ``(sum w)^2 / sum w^2`` over valid samples
says how many samples the update effectively uses.
"""

from __future__ import annotations

import torch

PREFIX = "dataflex/"


def weight_metrics(factor: torch.Tensor, valid_tokens: torch.Tensor) -> dict[str, float]:
    """Mean/std/min/max over valid tokens, ESS and the zero-weight fraction over valid samples.

    ``factor`` is ``(bs, L)`` per token, or ``(bs,)`` per sample (the weight of each of a row's valid
    tokens). Masked reductions only (no boolean indexing): this runs on the whole global batch every step.
    """
    token_count = valid_tokens.sum(-1)
    if factor.dim() == 1:
        return _sample_metrics(factor, token_count)
    num_tokens = int(token_count.sum())
    valid_rows = token_count > 0
    num_samples = int(valid_rows.sum())
    if num_tokens == 0:
        return {f"{PREFIX}valid_samples": 0.0, f"{PREFIX}valid_tokens": 0.0}
    w = torch.where(valid_tokens, factor, torch.zeros((), dtype=factor.dtype, device=factor.device))
    row_sum = w.sum(-1, dtype=torch.float64)
    mean = row_sum.sum() / num_tokens
    second = (w * w).sum(dtype=torch.float64) / num_tokens
    inf = torch.full((), float("inf"), dtype=factor.dtype, device=factor.device)
    low = torch.where(valid_tokens, factor, inf).amin()
    high = torch.where(valid_tokens, factor, -inf).amax()
    zero = torch.zeros((), dtype=torch.float64, device=factor.device)
    per_sample = torch.where(valid_rows, row_sum / token_count.clamp(min=1), zero)
    total, squares = per_sample.sum(), (per_sample * per_sample).sum()
    ess = float(total**2 / squares) if squares > 0 else 0.0
    zero_samples = int((valid_rows & (per_sample == 0)).sum())
    return {
        f"{PREFIX}weight/mean": mean.item(),
        f"{PREFIX}weight/std": (second - mean * mean).clamp(min=0).sqrt().item(),
        f"{PREFIX}weight/min": low.item(),
        f"{PREFIX}weight/max": high.item(),
        f"{PREFIX}ess": ess,
        f"{PREFIX}ess_fraction": ess / num_samples,
        f"{PREFIX}zero_weight_fraction": zero_samples / num_samples,
        f"{PREFIX}valid_samples": float(num_samples),
        f"{PREFIX}valid_tokens": float(num_tokens),
    }


def _sample_metrics(weights: torch.Tensor, token_count: torch.Tensor) -> dict[str, float]:
    """:func:`weight_metrics` for per-sample weights, from the per-row token counts alone."""
    rows = token_count > 0
    num_tokens = int(token_count.sum())
    num_samples = int(rows.sum())
    if num_tokens == 0:
        return {f"{PREFIX}valid_samples": 0.0, f"{PREFIX}valid_tokens": 0.0}
    w = torch.where(rows, weights.to(torch.float64), torch.zeros((), dtype=torch.float64, device=weights.device))
    counts = token_count.to(torch.float64)
    mean = (w * counts).sum() / num_tokens
    second = (w * w * counts).sum() / num_tokens
    inf = torch.full((), float("inf"), dtype=torch.float64, device=weights.device)
    total, squares = w.sum(), (w * w).sum()
    ess = float(total**2 / squares) if squares > 0 else 0.0
    return {
        f"{PREFIX}weight/mean": mean.item(),
        f"{PREFIX}weight/std": (second - mean * mean).clamp(min=0).sqrt().item(),
        f"{PREFIX}weight/min": torch.where(rows, w, inf).amin().item(),
        f"{PREFIX}weight/max": torch.where(rows, w, -inf).amax().item(),
        f"{PREFIX}ess": ess,
        f"{PREFIX}ess_fraction": ess / num_samples,
        f"{PREFIX}zero_weight_fraction": int((rows & (w == 0)).sum()) / num_samples,
        f"{PREFIX}valid_samples": float(num_samples),
        f"{PREFIX}valid_tokens": float(num_tokens),
    }
