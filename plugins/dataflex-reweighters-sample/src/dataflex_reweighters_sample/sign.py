"""``positive_downweight``: damp samples with a positive advantage."""

from __future__ import annotations

import torch

from dataflex_core import Reweighter, actuator_scores, register_reweighter

from ._inputs import advantage_sign, finish


@register_reweighter("positive_downweight")
class PositiveDownweightReweighter(Reweighter):
    """Weight ``positive_weight`` for samples with A > 0 and 1 for the rest (W-REINFORCE).

    Negative samples alone train well and keep the policy's diversity;
    positive ones sharpen it. W-REINFORCE keeps both with the positive term
    scaled down.
    Paper: "The Surprising Effectiveness of Negative Reinforcement in LLM
    Reasoning" (Zhu et al., arXiv 2506.01347), W-REINFORCE with lambda = 0.1.

    Formula: w_i ∝ positive_weight if sum_t m_it A_it > 0 else 1, then mean
    one over valid rows.
    Inputs: ``advantages`` and ``response_mask`` (bs, L); the scores are
    checked for shape but not otherwise used (any sample scorer may drive it).
    Output: (bs,) float32, 0 on padding and empty rows.
    Edge cases: all-positive batches get uniform weights; so do all-negative
    ones; positive_weight = 1 is uniform.

    :param positive_weight: lambda >= 0, the relative weight of positive samples.
    """

    requires = ["advantages", "response_mask"]
    accepts_granularity = ("prompt", "response")

    def __init__(self, positive_weight: float = 0.1, **kwargs):
        super().__init__(**kwargs)
        if not positive_weight >= 0:
            raise ValueError(f"positive_downweight positive_weight must be >= 0, got {positive_weight!r}")
        self.positive_weight = float(positive_weight)

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        _, valid = actuator_scores(scores, batch, owner="positive_downweight", granularity="sample")
        sign = advantage_sign("positive_downweight", batch).to(valid.device)
        damped = torch.full((), self.positive_weight, dtype=torch.float32, device=valid.device)
        return finish(torch.where(sign > 0, damped, torch.ones((), device=valid.device)), valid)
