"""Tutorial reweighter: tilt the loss weights linearly in the standardised score."""

import torch

from dataflex_core import Reweighter, actuator_scores, mean_one, register_reweighter


@register_reweighter("zscore_tilt")
class ZScoreTiltReweighter(Reweighter):
    """w = clip(1 + beta * z, min_weight, max_weight), then mean one over valid units.

    z = (s - mean(s)) / std(s), with mean and standard deviation taken over the
    valid units only (valid samples for (bs,) scores, valid tokens for (bs, L)).
    beta > 0 favours high scores, beta < 0 low ones. Constant scores give z = 0
    and therefore uniform weights. Statistics are computed in float64, so scores
    of magnitude 1e6 or 1e-6 work alike; the weights come back as float32.
    """

    accepts_granularity = ("prompt", "response", "token")

    def __init__(self, beta: float = 0.5, min_weight: float = 0.1, max_weight: float = 3.0, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 < min_weight <= 1.0 <= max_weight:
            raise ValueError(
                f"need 0 < min_weight <= 1 <= max_weight, got min_weight={min_weight}, max_weight={max_weight}"
            )
        self.beta = beta
        self.min_weight = min_weight
        self.max_weight = max_weight

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        per_token = getattr(scores, "ndim", 1) == 2
        # Checked scores (right shape, finite on valid units) in float64, and the matching validity mask.
        s, valid = actuator_scores(
            scores, batch, owner=self.describe(), granularity="token" if per_token else "sample", dtype=torch.float64
        )
        s = torch.where(valid, s, 0.0)
        count = valid.sum().clamp(min=1)
        mean = s.sum() / count
        std = (torch.where(valid, s - mean, 0.0).square().sum() / count).sqrt()
        z = (s - mean) / std.clamp(min=1e-12)  # constant scores: 0 / tiny = 0
        w = (1.0 + self.beta * z).clamp(self.min_weight, self.max_weight)
        return mean_one(w.to(torch.float32), batch)  # invalid units -> 0, the rest mean 1
