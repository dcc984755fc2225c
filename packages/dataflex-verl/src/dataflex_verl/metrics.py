"""Per-step ``dataflex/`` metrics, logged with verl's own step metrics.

Statistics describe the DataFlex factor (the weights DataFlex multiplied into
``rollout_is_weights``), over valid tokens. A sample's weight is the
token-mean of its weights; the effective sample size ``(sum w)^2 / sum w^2``
over valid samples says how many samples the update effectively uses.
"""

from __future__ import annotations

import torch

PREFIX = "dataflex/"


def weight_metrics(factor: torch.Tensor, valid_tokens: torch.Tensor) -> dict[str, float]:
    """Mean/std/min/max over valid tokens, ESS and the zero-weight fraction over valid samples."""
    valid_rows = valid_tokens.any(-1)
    values = factor[valid_tokens].to(torch.float64)
    if values.numel() == 0:
        return {f"{PREFIX}valid_samples": 0.0, f"{PREFIX}valid_tokens": 0.0}
    zero = torch.zeros((), dtype=factor.dtype)
    per_sample = torch.where(valid_tokens, factor, zero).sum(-1) / valid_tokens.sum(-1).clamp(min=1)
    per_sample = per_sample[valid_rows].to(torch.float64)
    total, squares = per_sample.sum(), (per_sample**2).sum()
    ess = float(total**2 / squares) if squares > 0 else 0.0
    n = per_sample.numel()
    return {
        f"{PREFIX}weight/mean": values.mean().item(),
        f"{PREFIX}weight/std": values.std(unbiased=False).item(),
        f"{PREFIX}weight/min": values.min().item(),
        f"{PREFIX}weight/max": values.max().item(),
        f"{PREFIX}ess": ess,
        f"{PREFIX}ess_fraction": ess / n,
        f"{PREFIX}zero_weight_fraction": float((per_sample == 0).sum().item()) / n,
        f"{PREFIX}valid_samples": float(n),
        f"{PREFIX}valid_tokens": float(values.numel()),
    }
