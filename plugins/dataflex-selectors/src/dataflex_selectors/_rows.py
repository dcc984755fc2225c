"""Shared plumbing of the selectors: group ids, parameter checks and ranks within groups.

Ranking inside GRPO groups is done with two stable sorts (by key, then by
group), so every group is ranked at once and ties always resolve to the lower
row index, which makes a selection reproducible across runs and hosts.
"""

from __future__ import annotations

from typing import Any

import torch

from dataflex_core.contracts import require_groups


def positive_int(owner: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{owner}: {name} must be an integer >= 1, got {value!r}")
    return value


def dense_groups(batch: Any, valid: torch.Tensor, owner: str) -> tuple[torch.Tensor, int]:
    """Group index per row with invalid rows moved to an extra group ``G`` that is never kept."""
    index, num_groups = require_groups(batch, owner, device=valid.device)
    index = torch.where(valid, index, torch.full_like(index, num_groups))
    return index, num_groups + 1


def rank_in_group(
    keys: list[tuple[torch.Tensor, bool]], group: torch.Tensor, num_groups: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank of every row inside its group after sorting by ``keys``.

    :param keys: ``(values, descending)`` pairs, most significant first.
    :returns: ``(rank, group_size)``, both ``(bs,)`` LongTensors; rank 0 is the best row.
    """
    bs = group.shape[0]
    order = torch.arange(bs, device=group.device)
    for values, descending in reversed(keys):
        perm = torch.sort(values[order], descending=descending, stable=True).indices
        order = order[perm]
    order = order[torch.sort(group[order], stable=True).indices]
    sizes = torch.bincount(group, minlength=num_groups)
    starts = torch.cumsum(sizes, 0) - sizes
    sorted_group = group[order]
    rank = torch.empty(bs, dtype=torch.long, device=group.device)
    rank[order] = torch.arange(bs, device=group.device) - starts[sorted_group]
    return rank, sizes[group]
