"""Group advantages recomputed on the kept rows, and how a selector asks for it.

GFPO and PODS normalise each response against the *kept* members of its
group, not against everything that was sampled. A selector asks its host for
that by carrying a truthy ``recompute_advantage`` attribute (every selector
here takes it as a param); hosts read it with :func:`wants_recomputed_advantage`.
A host with its own estimator registry (verl) should rerun that estimator on
the kept rows; :func:`group_advantage_on_subset` is the GRPO formula for hosts
without one, and the reference the tests hold hosts to.
"""

from __future__ import annotations

from typing import Any

import torch

from dataflex_core import group_index, segment_count, segment_mean, segment_var


def wants_recomputed_advantage(selector: Any) -> bool:
    """True when ``selector`` asks for group advantages on its kept rows only."""
    return bool(getattr(selector, "recompute_advantage", False))


def group_advantage_on_subset(
    rewards: torch.Tensor,
    uid: Any,
    kept: torch.Tensor,
    *,
    norm_by_std: bool = True,
    epsilon: float = 1e-6,
) -> torch.Tensor:
    """GRPO outcome advantages computed as if only the ``kept`` rows had been sampled.

    ``(r - mean_g) / (std_g + epsilon)`` with the mean and the unbiased std
    over the kept members of each ``uid`` group (``r - mean_g`` without
    ``norm_by_std``); a group with a single kept member gets mean 0 and std 1,
    as in verl's ``grpo`` estimator. Dropped rows get 0.

    :param rewards: ``(bs,)`` sequence rewards.
    :param uid: ``(bs,)`` group ids (array or tensor).
    :param kept: ``(bs,)`` bool mask of kept rows.
    :returns: float32 ``(bs,)`` advantages (broadcast over ``response_mask`` for tokens).
    """
    r = rewards.detach().to(torch.float32)
    kept = kept.to(r.device).bool()
    index, num_groups = group_index(uid, device=r.device)
    count = segment_count(index, num_groups, kept)
    mean = segment_mean(r, index, num_groups, kept)
    unbiased = segment_var(r, index, num_groups, kept) * count / (count - 1).clamp(min=1)
    std = unbiased.sqrt()
    single = count <= 1
    mean = torch.where(single, torch.zeros_like(mean), mean)
    std = torch.where(single, torch.ones_like(std), std)
    adv = r - mean[index]
    if norm_by_std:
        adv = adv / (std[index] + epsilon)
    return torch.where(kept, adv, torch.zeros_like(adv))
