"""``max_variance``: PODS max-variance down-sampling (arXiv 2504.13818).

PODS generates ``n`` rollouts per prompt and trains on the size-``m`` subset
whose rewards have the largest variance, which keeps the contrast GRPO learns
from while cutting the update cost. For scalar rewards that subset is always
the ``m - i`` lowest plus the ``i`` highest rewards of the group for some
``0 <= i <= m`` (the paper's Lemma), so the search is over ``m + 1``
candidates per group. Here every group's ``m + 1`` candidates are scored at
once from prefix sums of the group-sorted rewards: no loop over groups.

The advantage is then computed on the kept subset, as in the paper, so
``recompute_advantage`` defaults to True.
"""

from __future__ import annotations

import torch

from dataflex_core import Selector, actuator_scores, register_selector, segment_min

from ._rows import dense_groups, positive_int, rank_in_group


def _exclusive_cumsum(values: torch.Tensor) -> torch.Tensor:
    return torch.cat([values.new_zeros(1), torch.cumsum(values, 0)])


@register_selector("max_variance")
class MaxVarianceSelector(Selector):
    """Keep, per group, the ``keep_per_group`` rewards (paper symbol ``m``) with maximal variance.

    :param keep_per_group: subset size per group; groups with at most this
        many valid responses keep all of them.
    :param recompute_advantage: ask the host to recompute group advantages on
        the kept responses only, as the paper does (default True).

    The reward is the scorer's signal (pair it with ``reward_difficulty``).
    Among equally good subsets the one with fewer top rewards wins; among
    equal rewards the low end takes the first rows and the high end the last
    rows. Returns a bool mask ``(bs,)``.
    """

    needs_groups = True
    accepts_granularity = ("prompt", "response")

    def __init__(self, keep_per_group: int = 4, recompute_advantage: bool = True, **kwargs) -> None:
        super().__init__(**kwargs)
        self.keep_per_group = positive_int("max_variance", "keep_per_group", keep_per_group)
        self.recompute_advantage = bool(recompute_advantage)

    def act(self, scores, batch, **ctx) -> torch.Tensor:
        reward, valid = actuator_scores(scores, batch, owner=self.describe(), granularity="sample", dtype=torch.float64)
        group, num_groups = dense_groups(batch, valid, self.describe())
        m = self.keep_per_group
        # Ascending rank inside each group: rank 0 is the lowest reward.
        rank, size = rank_in_group([(reward, False)], group, num_groups)
        bs = reward.shape[0]
        sorted_rows = torch.empty(bs, dtype=torch.long, device=reward.device)
        sizes = torch.bincount(group, minlength=num_groups)
        starts = torch.cumsum(sizes, 0) - sizes
        sorted_rows[starts[group] + rank] = torch.arange(bs, device=reward.device)
        # Variance is shift-invariant; shifting each group by its minimum keeps the
        # prefix sums well conditioned for large rewards and integers exact.
        floor = segment_min(reward, group, num_groups)[group]
        centred = torch.where(valid, reward - floor, torch.zeros_like(reward))
        sorted_reward = centred[sorted_rows]
        prefix = _exclusive_cumsum(sorted_reward)
        prefix_sq = _exclusive_cumsum(sorted_reward**2)

        # Candidate i takes the i highest and the m - i lowest rewards of the group.
        top = torch.arange(m + 1, device=reward.device).unsqueeze(0)  # (1, m+1)
        start = starts.unsqueeze(1)
        n = sizes.unsqueeze(1)
        low_end = (start + m - top).clamp(max=prefix.shape[0] - 1)
        high_start = (start + n - top).clamp(min=0)
        end = start + n

        def subset_sum(p: torch.Tensor) -> torch.Tensor:
            return (p[low_end] - p[start]) + (p[end] - p[high_start])

        # m**2 * variance = m * sum(x**2) - sum(x)**2; exact for integer rewards, so ties stay ties.
        spread = m * subset_sum(prefix_sq) - subset_sum(prefix) ** 2
        best_top = spread.argmax(dim=1)  # first maximum: fewest top rewards

        kept_top = best_top[group]
        in_subset = (rank < m - kept_top) | (rank >= size - kept_top)
        small_group = size <= m
        return valid & (small_group | in_subset)
