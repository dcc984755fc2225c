"""``reward_gap``: sample each domain in proportion to how far its signal falls short of a target.

With a reward scorer (``reward_difficulty``) and ``target: 1.0`` the share of
a domain is proportional to ``1 - mean reward``: domains the policy has
mastered fade out, domains it still fails get more prompts. ``min_share``
keeps every domain in the mix, so a mastered domain that regresses is noticed.
"""

from __future__ import annotations

from typing import Any

import torch

from dataflex_core import register_mixer

from .base import WindowedDomainMixer, _floor_share, with_floor


@register_mixer("reward_gap")
class RewardGapMixer(WindowedDomainMixer):
    """``p_d ∝ max(target - s_d, 0)``, mixed with uniform so that ``p_d >= min_share``.

    :param target: signal level at which a domain counts as mastered (default 1.0).
    :param min_share: lower bound on every domain's proportion (default 0.05).
    :param window: training steps averaged into ``s_d``, the domain's mean
        signal per step (default 10).

    A domain never observed gets the largest observed gap (it is explored
    first); with no gap anywhere the proportions are uniform.
    """

    def __init__(self, target: float = 1.0, min_share: float = 0.05, window: int = 10, **kwargs: Any) -> None:
        super().__init__(window=window, **kwargs)
        self.target = float(target)
        self.min_share = _floor_share("reward_gap", min_share)

    def _on_bind(self, num_domains: int) -> None:
        super()._on_bind(num_domains)
        with_floor(torch.full((num_domains,), 1.0 / num_domains), self.min_share)

    def propose(self) -> torch.Tensor:
        estimate, known = self.window_mean()
        gap = (self.target - estimate).clamp(min=0)
        if known.any():
            gap = torch.where(known, gap, gap[known].max())
        else:
            gap = torch.ones_like(gap)
        p = gap / gap.sum() if gap.sum() > 0 else torch.full_like(gap, 1.0 / gap.shape[0])
        return with_floor(p, self.min_share)
