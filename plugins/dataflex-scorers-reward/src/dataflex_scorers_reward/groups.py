"""Statistics of the outcome rewards within each GRPO group (the rollouts of one prompt).

Every statistic is taken over the group's valid rows only: padding rows
(verl's balancing appends them with a shared ``pad`` uid) and rows with an
empty response are left out, and score 0 themselves. One ``unique`` and a
few scatters compute all groups at once.
"""

from __future__ import annotations

import torch

from dataflex_core import (
    Scorer,
    register_scorer,
    segment_count,
    segment_sum,
    segment_var,
    valid_sample_mask,
)

from .rewards import DEFAULT_REWARD_KEY, check_reward_key, group_ids, sequence_reward

#: ``group_reward_variance`` forms, in the order shown in errors.
VARIANCE_FORMS = ("variance", "binary", "vcrl")


class _GroupRewardScorer(Scorer):
    """Shared declarations and input handling of the group scorers."""

    requires = [DEFAULT_REWARD_KEY, "response_mask"]
    timing = "post_reward"
    granularity = "prompt"
    needs_groups = True

    def __init__(self, reward_key: str = DEFAULT_REWARD_KEY, success_threshold: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.reward_key = check_reward_key(self.name, reward_key)
        self.requires = [self.reward_key, "response_mask"]
        self.success_threshold = float(success_threshold)

    def _rewards_and_groups(self, batch):
        reward = sequence_reward(batch, self.reward_key, self.name)
        valid = valid_sample_mask(batch).to(reward.device)
        index, num_groups = group_ids(batch, self.name, reward.device)
        return reward, valid, index, num_groups

    def _successes(self, reward, valid, index, num_groups):
        """Per group: number of valid rows with reward > threshold, and number of valid rows."""
        success = (reward > self.success_threshold).to(reward.dtype)
        return segment_sum(success, index, num_groups, valid), segment_count(index, num_groups, valid).to(reward.dtype)


@register_scorer("group_solve_rate")
class GroupSolveRateScorer(_GroupRewardScorer):
    """Each sample's group success rate p̂: the fraction of its prompt's rollouts that succeed.

    Paper: the empirical per-prompt accuracy that difficulty-aware GRPO
    variants weight by, e.g. GRPO-LEAD (arXiv 2504.09696) and F-GRPO
    (arXiv 2602.06717).

    Formula: for group g with valid rows V_g,
    p̂_g = |{i in V_g : r_i > success_threshold}| / |V_g|, and s_i = p̂_{g(i)},
    where r_i is the sequence reward (masked sum of ``reward_key``).
    Inputs: ``reward_key`` field (default ``rm_scores``), ``response_mask``,
    ``uid`` (needs_groups), optional ``is_padding``.
    Output: (bs,) float32 in [0, 1] (float64 for float64 rewards).
    Edge cases: padding rows and empty rows score 0 and do not count in their
    group; a group of one valid row has p̂ in {0, 1}.

    :param reward_key: token-level reward field.
    :param success_threshold: a rollout succeeds when its reward is strictly
        greater (0.0 fits both 0/1 and -1/+1 rewards).
    """

    score_range = (0.0, 1.0)

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        reward, valid, index, num_groups = self._rewards_and_groups(batch)
        successes, members = self._successes(reward, valid, index, num_groups)
        rate = successes / members.clamp(min=1)
        return torch.where(valid, rate[index], torch.zeros((), dtype=rate.dtype, device=rate.device))


@register_scorer("group_reward_variance")
class GroupRewardVarianceScorer(_GroupRewardScorer):
    """How mixed a prompt's outcomes are: the variance of its group's rewards.

    Too easy or too hard prompts give every rollout the same reward (variance
    0); prompts at the edge of the policy's ability give the most varied ones.
    Paper: VCRL, variance-based curriculum RL (arXiv 2509.19803).

    Formula, over the valid rows V_g of group g (n = |V_g|):
    ``variance``: population variance (1/n) sum_i (r_i - mean_g r)^2 of the
    sequence rewards, any reward scale;
    ``binary``: with k = |{i : r_i > success_threshold}|, the unbiased
    Bernoulli variance k(n-k) / (n(n-1));
    ``vcrl``: that variance divided by its maximum over k (at k* = floor(n/2)),
    p = k(n-k) / (k*(n-k*)), in [0, 1] as VCRL uses it.
    Inputs: ``reward_key`` field, ``response_mask``, ``uid``, optional ``is_padding``.
    Output: (bs,) float32 (float64 for float64 rewards), non-negative; each
    sample gets its group's value.
    Edge cases: groups with fewer than two valid rows score 0 under
    ``binary`` and ``vcrl`` (and 0 under ``variance``); padding and empty
    rows score 0 and are not members.

    :param form: ``variance`` (default), ``binary`` or ``vcrl``.
    :param reward_key: token-level reward field.
    :param success_threshold: success cut for ``binary``/``vcrl``.
    """

    def __init__(self, form: str = "variance", **kwargs):
        super().__init__(**kwargs)
        if form not in VARIANCE_FORMS:
            raise ValueError(
                f"group_reward_variance form={form!r} is not supported; use one of {', '.join(VARIANCE_FORMS)}"
            )
        self.form = form

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        reward, valid, index, num_groups = self._rewards_and_groups(batch)
        if self.form == "variance":
            per_group = segment_var(reward, index, num_groups, valid)
        else:
            k, n = self._successes(reward, valid, index, num_groups)
            spread = k * (n - k)
            if self.form == "binary":
                norm = n * (n - 1)
            else:
                half = torch.floor(n / 2)
                norm = half * (n - half)
            per_group = torch.where(n >= 2, spread / norm.clamp(min=1), torch.zeros_like(spread))
        zero = torch.zeros((), dtype=per_group.dtype, device=per_group.device)
        return torch.where(valid, per_group[index], zero)
