"""Vectorised per-group and per-sequence reductions.

Hosts call components on the whole global batch (tens of thousands of rows), so group statistics are computed with one
``unique`` and a scatter, never a Python loop over samples or groups, and no masked sequence reduction builds a
``(bs, L)`` temporary on the CPU.
"""

from __future__ import annotations

from typing import Any

import torch

from .precomputed import dense_group_index, masked_row_reduce, row_counts


def group_index(uid: Any, device: torch.device | str | None = None) -> tuple[torch.Tensor, int]:
    """Map group ids (any hashable per sample) to dense ``0..G-1`` indices.

    Ids compare the way they arrive: a numeric array or tensor by value, an object or string array by text
    (``str(id)``), so there ``1`` and ``"1"`` are one group, as they are after a JSON or parquet round trip, while ``1``
    and ``1.0`` are two. Indices follow the sorted order of the ids.

    :returns: ``(index, num_groups)`` with ``index`` a LongTensor of shape ``(bs,)``.
    """
    return dense_group_index(uid, device)


def consecutive_group_rows(groups: torch.Tensor, size: int) -> torch.Tensor:
    """The row indices of groups ``groups`` in a batch laid out as groups of ``size`` consecutive rows (a
    framework's interleaved repeat of each prompt), in the order given: a refill's pick of whole groups."""
    return (groups.to(torch.long).unsqueeze(1) * int(size) + torch.arange(int(size))).reshape(-1)


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


def masked_seq_sum(x: torch.Tensor, mask: torch.Tensor, *, magnitude: bool = False) -> torch.Tensor:
    """``(bs, L)`` -> ``(bs,)`` sum over positions where ``mask`` is set (of ``|x|`` with ``magnitude``)."""
    return masked_row_reduce(x, mask.bool(), 0.0, lambda v: v.sum(-1), magnitude)


def masked_seq_mean(x: torch.Tensor, mask: torch.Tensor, *, magnitude: bool = False) -> torch.Tensor:
    """``(bs, L)`` -> ``(bs,)`` mean over masked positions (of ``|x|`` with ``magnitude``); an empty row gives 0."""
    bool_mask = mask.bool()
    count = row_counts(bool_mask).clamp(min=1).to(x.dtype)
    return masked_row_reduce(x, bool_mask, 0.0, lambda v: v.sum(-1), magnitude) / count


def masked_seq_max(x: torch.Tensor, mask: torch.Tensor, *, magnitude: bool = False) -> torch.Tensor:
    """``(bs, L)`` -> ``(bs,)`` max over masked positions (of ``|x|`` with ``magnitude``); an empty row gives 0."""
    m = mask.bool()
    # |x| >= 0, so filling masked positions with 0 instead of -inf leaves every non-empty row's max unchanged.
    fill = 0.0 if magnitude else float("-inf")
    out = masked_row_reduce(x, m, fill, lambda v: v.amax(-1), magnitude)
    return torch.where(row_counts(m) > 0, out, torch.zeros_like(out))
