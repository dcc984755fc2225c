"""Vectorised per-group and per-sequence reductions.

Hosts call components on the whole global batch (tens of thousands of rows),
so group statistics are computed with one ``unique`` and a scatter, never a
Python loop over samples or groups.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def group_index(uid: Any, device: torch.device | str | None = None) -> tuple[torch.Tensor, int]:
    """Map group ids (any hashable per sample) to dense ``0..G-1`` indices.

    :returns: ``(index, num_groups)`` with ``index`` a LongTensor of shape ``(bs,)``.
    """
    if isinstance(uid, torch.Tensor):
        _, inverse = torch.unique(uid, return_inverse=True)
        return inverse.to(device or uid.device), int(inverse.max().item()) + 1 if inverse.numel() else 0
    arr = np.asarray(uid)
    if arr.dtype == object:
        arr = arr.astype(str)
    _, inverse = np.unique(arr, return_inverse=True)
    index = torch.from_numpy(inverse.reshape(-1).astype(np.int64))
    return index.to(device or "cpu"), int(inverse.max()) + 1 if inverse.size else 0


def _masked(values: torch.Tensor, mask: torch.Tensor | None, fill: float) -> torch.Tensor:
    if mask is None:
        return values
    return torch.where(mask.bool(), values, torch.full_like(values, fill))


def segment_count(index: torch.Tensor, num_segments: int, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Members per segment (only rows where ``mask`` is true); float32 ``(G,)``."""
    ones = torch.ones(index.shape[0], dtype=torch.float32, device=index.device)
    ones = _masked(ones, mask, 0.0)
    return torch.zeros(num_segments, dtype=torch.float32, device=index.device).index_add_(0, index, ones)


def segment_sum(
    values: torch.Tensor, index: torch.Tensor, num_segments: int, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Sum of ``values`` per segment over rows where ``mask`` is true; shape ``(G,)``."""
    values = _masked(values, mask, 0.0)
    out = torch.zeros(num_segments, dtype=values.dtype, device=values.device)
    return out.index_add_(0, index, values)


def segment_mean(
    values: torch.Tensor, index: torch.Tensor, num_segments: int, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean per segment; a segment with no (unmasked) member has mean 0."""
    total = segment_sum(values, index, num_segments, mask)
    count = segment_count(index, num_segments, mask).to(total.dtype)
    return total / count.clamp(min=1)


def segment_max(
    values: torch.Tensor, index: torch.Tensor, num_segments: int, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Max per segment; an empty segment gives ``-inf``."""
    values = _masked(values, mask, float("-inf"))
    out = torch.full((num_segments,), float("-inf"), dtype=values.dtype, device=values.device)
    return out.scatter_reduce_(0, index, values, reduce="amax", include_self=True)


def segment_min(
    values: torch.Tensor, index: torch.Tensor, num_segments: int, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Min per segment; an empty segment gives ``+inf``."""
    values = _masked(values, mask, float("inf"))
    out = torch.full((num_segments,), float("inf"), dtype=values.dtype, device=values.device)
    return out.scatter_reduce_(0, index, values, reduce="amin", include_self=True)


def segment_var(
    values: torch.Tensor, index: torch.Tensor, num_segments: int, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Population variance per segment (divides by the member count)."""
    mean = segment_mean(values, index, num_segments, mask)
    dev = (values - mean[index]) ** 2
    return segment_mean(dev, index, num_segments, mask)


def masked_seq_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(bs, L)`` -> ``(bs,)`` sum over positions where ``mask`` is set."""
    return torch.where(mask.bool(), x, torch.zeros((), dtype=x.dtype, device=x.device)).sum(-1)


def masked_seq_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(bs, L)`` -> ``(bs,)`` mean over masked positions; an empty row gives 0."""
    count = mask.bool().sum(-1).clamp(min=1).to(x.dtype)
    return masked_seq_sum(x, mask) / count


def masked_seq_max(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(bs, L)`` -> ``(bs,)`` max over masked positions; an empty row gives 0."""
    m = mask.bool()
    neg = torch.full((), float("-inf"), dtype=x.dtype, device=x.device)
    out = torch.where(m, x, neg).amax(-1)
    return torch.where(m.any(-1), out, torch.zeros_like(out))
