"""``centered_linear``: weights that grow linearly with the score around its batch mean."""

from __future__ import annotations

import torch

from dataflex_core import Reweighter, actuator_scores, normalize_mean_one, register_reweighter


@register_reweighter("centered_linear")
class CenteredLinearReweighter(Reweighter):
    """Gently favour samples with above-average scores.

    Formula, over valid rows V: z_i = (s_i − mean_V s) / max_V |s − mean_V s|
    (in [−1, 1]); w_i ∝ 1 + strength · z_i, then scaled to mean one over V.
    Inputs: scores (bs,) of any float dtype and magnitude.
    Output: (bs,) float32, >= 0, mean one over valid rows, 0 on padding and
    empty rows.
    Edge cases: constant scores (z = 0) give uniform weights; strength 0 is
    uniform; centring in float64 keeps scores of magnitude 1e6 or 1e-6 exact
    enough; scores of the wrong shape, or NaN/inf on a valid row, raise
    ``InvalidOutputError`` naming this reweighter.

    :param strength: in [0, 1]; the weight of the lowest score relative to
        the mean is at least 1 − strength.
    """

    accepts_granularity = ("prompt", "response")

    def __init__(self, strength: float = 0.5, **kwargs):
        super().__init__(**kwargs)  # the base raises on any param nobody accepted
        if not 0 <= strength <= 1:
            raise ValueError(f"centered_linear strength must be in [0, 1], got {strength!r}")
        self.strength = float(strength)

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        # The check every actuator runs: (bs,) scores, finite on valid rows; float64 and the valid rows back.
        s, valid = actuator_scores(scores, batch, owner=self.describe(), granularity="sample", dtype=torch.float64)
        zero = torch.zeros((), dtype=torch.float64, device=s.device)
        mean = torch.where(valid, s, zero).sum() / valid.sum().clamp(min=1)
        deviation = torch.where(valid, s - mean, zero)
        spread = deviation.abs().max()
        z = torch.where(spread > 0, deviation / spread, zero)
        return normalize_mean_one(1 + self.strength * z, valid).float()
