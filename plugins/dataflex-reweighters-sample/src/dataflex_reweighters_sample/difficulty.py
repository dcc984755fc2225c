"""Difficulty-aware weights from each prompt's solve rate p̂.

These reweighters take p̂ of a row as the mean score over the valid rows of
its ``uid`` group, so they declare ``needs_groups``. Paired with
``group_solve_rate`` (constant within a group) that mean is p̂ itself; paired
with ``reward_difficulty`` on 0/1 rewards it is the group's solve rate. Either
way binary rewards get a real middle: banding the 0/1 rewards themselves
would collapse to two values. Scores must lie in [0, 1]; anything else
(raw ±1 rewards, advantages) raises an error naming the scorer to pair with,
since powering or banding them would run without complaint and mean nothing.
"""

from __future__ import annotations

import torch

from dataflex_core import Reweighter, actuator_scores, register_reweighter

from ._inputs import advantage_sign, finish, group_solve_rates


@register_reweighter("difficulty_band")
class DifficultyBandReweighter(Reweighter):
    """Full weight for prompts of middling difficulty, ``outside_weight`` for too easy or too hard ones.

    Paper: online difficulty filtering, which drops prompts whose group
    accuracy is 0 or 1 (DAPO dynamic sampling, arXiv 2503.14476); here a
    configurable band, applied as a weight rather than a filter.

    Formula: w_i ∝ 1 if low <= p̂_i <= high else outside_weight, scaled to mean
    one over valid rows.
    Inputs: scores (bs,) in [0, 1], p̂ = their mean over the row's valid
    group members (pair with ``group_solve_rate``, or ``reward_difficulty``
    on 0/1 rewards); ``uid``.
    Output: (bs,) float32, 0 on padding and empty rows.
    Edge cases: constant p̂ gives uniform weights; with ``outside_weight: 0``
    and no valid row inside the band the weights are uniform (nothing to
    emphasise); scores outside [0, 1] raise ``ValueError``.

    :param low: lower edge of the band, inclusive.
    :param high: upper edge of the band, inclusive.
    :param outside_weight: relative weight (>= 0) of rows outside the band.
    """

    accepts_granularity = ("prompt", "response")
    needs_groups = True
    score_range = (0.0, 1.0)

    def __init__(self, low: float = 0.2, high: float = 0.8, outside_weight: float = 0.1, **kwargs):
        super().__init__(**kwargs)
        if not 0 <= low <= high <= 1:
            raise ValueError(f"difficulty_band needs 0 <= low <= high <= 1, got low={low!r}, high={high!r}")
        if not outside_weight >= 0:
            raise ValueError(f"difficulty_band outside_weight must be >= 0, got {outside_weight!r}")
        self.low = float(low)
        self.high = float(high)
        self.outside_weight = float(outside_weight)

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        p, valid = actuator_scores(scores, batch, owner="difficulty_band", granularity="sample")
        p = group_solve_rates("difficulty_band", p, valid, batch)
        inside = (p >= self.low) & (p <= self.high)
        outside = torch.full((), self.outside_weight, dtype=p.dtype, device=p.device)
        return finish(torch.where(inside, torch.ones_like(p), outside), valid)


@register_reweighter("grpo_lead")
class GrpoLeadReweighter(Reweighter):
    """GRPO-LEAD's difficulty-aware weights: reward correct answers to hard prompts, errors on easy ones.

    Paper: GRPO-LEAD (Zhang & Zuo, arXiv 2504.09696), difficulty-aware
    advantage reweighting.

    Formula: with the logistic
    w(p) = min_weight + (max_weight − min_weight) / (1 + exp(steepness · (p − midpoint))),
    a sample with advantage A > 0 gets w(p̂), with A < 0 gets w(1 − p̂), and
    with A = 0 (its group's rewards are all equal, so it has no gradient)
    gets 1; then mean one over valid rows. The sign of A is that of its
    masked sum over the response.
    Inputs: scores (bs,) in [0, 1], p̂ = their group mean (pair with
    ``group_solve_rate``); ``uid``; ``advantages`` and ``response_mask`` (bs, L).
    Output: (bs,) float32, 0 on padding and empty rows.
    Edge cases: the logistic is evaluated as a sigmoid, so any steepness is
    finite; constant p̂ gives uniform weights only when advantages share a
    sign (p̂ = midpoint = 0.5 always does); scores outside [0, 1] raise.

    :param min_weight: weight approached by the easiest prompts (>= 0).
    :param max_weight: weight approached by the hardest prompts (>= 0).
    :param steepness: slope k of the logistic (>= 0).
    :param midpoint: solve rate at which the weight is halfway.
    """

    requires = ["advantages", "response_mask"]
    accepts_granularity = ("prompt", "response")
    needs_groups = True
    score_range = (0.0, 1.0)

    def __init__(
        self,
        min_weight: float = 0.5,
        max_weight: float = 1.5,
        steepness: float = 10.0,
        midpoint: float = 0.5,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not (min_weight >= 0 and max_weight >= 0 and max(min_weight, max_weight) > 0):
            raise ValueError(
                f"grpo_lead needs min_weight >= 0 and max_weight >= 0, not both 0; got {min_weight!r}, {max_weight!r}"
            )
        if not steepness >= 0:
            raise ValueError(f"grpo_lead steepness must be >= 0, got {steepness!r}")
        self.min_weight = float(min_weight)
        self.max_weight = float(max_weight)
        self.steepness = float(steepness)
        self.midpoint = float(midpoint)

    def _logistic(self, p: torch.Tensor) -> torch.Tensor:
        falling = torch.sigmoid(-self.steepness * (p - self.midpoint))
        return self.min_weight + (self.max_weight - self.min_weight) * falling

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        p, valid = actuator_scores(scores, batch, owner="grpo_lead", granularity="sample")
        p = group_solve_rates("grpo_lead", p, valid, batch)
        sign = advantage_sign("grpo_lead", batch).to(device=p.device)
        w = torch.where(sign > 0, self._logistic(p), self._logistic(1 - p))
        return finish(torch.where(sign == 0, torch.ones_like(w), w), valid)


@register_reweighter("focal")
class FocalReweighter(Reweighter):
    """Down-weights prompts the policy already solves: (1 − p̂)^gamma.

    Paper: F-GRPO, focal weighting for group-relative policy optimisation
    (arXiv 2602.06717), g = (1 − μ̂_pos)^γ with μ̂_pos the group success rate.

    Formula: w_i ∝ (1 − p̂_i)^gamma, scaled to mean one over valid rows.
    Inputs: scores (bs,) in [0, 1], p̂ = their group mean (pair with
    ``group_solve_rate``); ``uid``.
    Output: (bs,) float32, 0 on padding and empty rows.
    Edge cases: gamma = 0 or constant p̂ gives uniform weights; when every
    valid prompt is solved (all weights 0) the weights are uniform; scores
    outside [0, 1] raise ``ValueError``.

    :param gamma: focusing exponent >= 0; larger values ignore easy prompts harder.
    """

    accepts_granularity = ("prompt", "response")
    needs_groups = True
    score_range = (0.0, 1.0)

    def __init__(self, gamma: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        if not gamma >= 0:
            raise ValueError(f"focal gamma must be >= 0, got {gamma!r}")
        self.gamma = float(gamma)

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        p, valid = actuator_scores(scores, batch, owner="focal", granularity="sample")
        p = group_solve_rates("focal", p, valid, batch)
        return finish((1 - p).pow(self.gamma), valid)
