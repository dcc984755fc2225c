"""``gfpo``: Group Filtered Policy Optimization (arXiv 2508.09726).

GFPO samples a larger group per prompt and trains only on the ``k`` responses
that score best on a length-aware metric, which curbs the length inflation of
GRPO. The paper computes the advantage over the retained responses only
(mean and std of the kept subset; filtered responses get zero advantage), so
``recompute_advantage`` defaults to True here.

Metrics (``metric`` param):

- ``length``: keep the ``k`` shortest responses (ties: higher reward, then
  lower row index).
- ``reward_per_length`` (token efficiency): keep the ``k`` most efficient.
  The paper's ``reward / length`` prefers *longer* responses when the reward
  is negative (``-1/100 > -1/10``), the opposite of its intent, so the
  efficiency used here is ``r / len`` for ``r >= 0`` and ``r * len`` for
  ``r < 0``: it grows with the reward and shrinks with the length at every
  reward sign, and equals the paper's metric for non-negative rewards.

The reward is the scorer's signal (pair it with ``reward_difficulty`` for the
outcome reward); the length is the number of response tokens
(``response_mask``), so the selector reads no other batch field.
"""

from __future__ import annotations

import torch

from dataflex_core import Selector, actuator_scores, register_selector

from ._rows import dense_groups, positive_int, rank_in_group

METRICS = ("length", "reward_per_length")


def token_efficiency(reward: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
    """Sign-aware ``reward / length``: increasing in reward, decreasing in length."""
    length = length.to(reward.dtype).clamp(min=1)
    return torch.where(reward >= 0, reward / length, reward * length)


@register_selector("gfpo")
class GFPOSelector(Selector):
    """Keep the ``keep_per_group`` best responses of every group (paper symbol ``k``).

    :param keep_per_group: responses kept per group; groups with fewer valid
        responses keep all of them.
    :param metric: ``length`` or ``reward_per_length`` (see the module docstring).
    :param recompute_advantage: ask the host to recompute group advantages on
        the kept responses only, as the paper does (default True).

    Returns a bool mask ``(bs,)``; padding and empty rows are never kept.
    """

    #: Lengths come from ``response_mask``; the reward is the scorer's signal.
    requires = ["response_mask"]
    needs_groups = True
    accepts_granularity = ("prompt", "response")

    def __init__(
        self, keep_per_group: int = 4, metric: str = "length", recompute_advantage: bool = True, **kwargs
    ) -> None:
        super().__init__(**kwargs)
        self.keep_per_group = positive_int("gfpo", "keep_per_group", keep_per_group)
        if metric not in METRICS:
            raise ValueError(f"gfpo: metric={metric!r} is not one of {', '.join(METRICS)}")
        self.metric = metric
        self.recompute_advantage = bool(recompute_advantage)

    def act(self, scores, batch, **ctx) -> torch.Tensor:
        reward, valid = actuator_scores(scores, batch, owner=self.describe(), granularity="sample", dtype=torch.float64)
        length = torch.count_nonzero(batch.batch["response_mask"].to(reward.device), dim=-1)
        group, num_groups = dense_groups(batch, valid, self.describe())
        if self.metric == "length":
            keys = [(length.to(torch.float64), False), (reward, True)]
        else:
            keys = [(token_efficiency(reward, length), True)]
        rank, _ = rank_in_group(keys, group, num_groups)
        return valid & (rank < self.keep_per_group)
