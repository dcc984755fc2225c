"""TRL's group advantages, recomputed as if only a selector's kept rows had been sampled.

GFPO-style selectors (``recompute_advantage = True``) want each kept
completion compared with the *kept* members of its group. TRL 1.16 computes
advantages inside ``_generate_and_score_completions`` from the gathered
per-function rewards, skipping NaN rewards (completions no reward function
scored) in every mean and std. So the recomputation is TRL's own formula with
the dropped rows' rewards set to NaN: they leave every group and batch
statistic, and their advantage becomes 0, exactly as for an unscorable
completion. :func:`grpo_advantages` reproduces that formula for both
``multi_objective_aggregation`` modes and every ``scale_rewards``.
"""

from __future__ import annotations

import torch
from trl.trainer.utils import nanstd

#: TRL adds this to the std before dividing (``_generate_and_score_completions``, TRL 1.16).
STD_EPSILON = 1e-4


def grpo_advantages(
    rewards_per_func: torch.Tensor,
    reward_weights: torch.Tensor,
    num_generations: int,
    *,
    scale_rewards: str,
    aggregation: str,
    kept: torch.Tensor | None = None,
) -> torch.Tensor:
    """TRL's advantages for the whole (gathered) generation batch, optionally on ``kept`` rows only.

    :param rewards_per_func: ``(B, K)`` rewards per completion and reward function, NaN where a
        function gave none (as ``_calculate_rewards`` returns them).
    :param reward_weights: ``(K,)`` the trainer's ``reward_weights``.
    :param num_generations: completions per prompt; groups are consecutive rows.
    :param scale_rewards: ``group``, ``batch`` or ``none``.
    :param aggregation: ``sum_then_normalize`` or ``normalize_then_sum``.
    :param kept: bool ``(B,)``; dropped rows leave every statistic and get advantage 0.
    :returns: float32 ``(B,)``.
    """
    rpf = rewards_per_func.to(torch.float32)
    if kept is not None:
        rpf = torch.where(kept.to(rpf.device).unsqueeze(1), rpf, torch.full_like(rpf, float("nan")))
    weights = reward_weights.to(rpf.device, torch.float32)
    unscorable = torch.isnan(rpf).all(dim=1)
    if aggregation == "sum_then_normalize":
        rewards = (rpf * weights.unsqueeze(0)).nansum(dim=1)
        rewards[unscorable] = torch.nan
        grouped = rewards.view(-1, num_generations)
        mean = torch.nanmean(grouped, dim=1).repeat_interleave(num_generations, dim=0)
        if scale_rewards in ("group", "none"):
            std = nanstd(grouped, dim=1).repeat_interleave(num_generations, dim=0) if num_generations > 1 else None
        elif scale_rewards == "batch":
            std = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else None
        else:
            raise ValueError(f"scale_rewards must be group, batch or none, got {scale_rewards!r}")
        std = torch.zeros_like(rewards) if std is None else std
        advantages = rewards - mean
        if scale_rewards != "none":
            advantages = advantages / (std + STD_EPSILON)
    elif aggregation == "normalize_then_sum":
        grouped = rpf.view(-1, num_generations, rpf.shape[1])
        mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
        std_k = nanstd(grouped, dim=1, keepdim=True) if num_generations > 1 else torch.zeros_like(mean_k)
        reward_k = ((grouped - mean_k) / (std_k + STD_EPSILON)).view(-1, rpf.shape[1])
        rewards = (reward_k * weights.unsqueeze(0)).nansum(dim=1)
        rewards[unscorable] = torch.nan
        std = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
        advantages = (rewards - torch.nanmean(rewards)) / (std + STD_EPSILON)
    else:
        raise ValueError(
            f"multi_objective_aggregation must be sum_then_normalize or normalize_then_sum, got {aggregation!r}"
        )
    return torch.nan_to_num(advantages, nan=0.0)


def completion_rewards(
    rewards_per_func: torch.Tensor, reward_weights: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(reward, scored)`` per completion: TRL's weighted sum over reward functions (NaN skipped, as TRL
    logs ``reward``), and False where no function gave a reward."""
    rpf = rewards_per_func.to(torch.float32)
    scored = ~torch.isnan(rpf).all(dim=1)
    reward = (rpf * reward_weights.to(rpf.device, torch.float32).unsqueeze(0)).nansum(dim=1)
    return torch.where(scored, reward, torch.zeros_like(reward)), scored
