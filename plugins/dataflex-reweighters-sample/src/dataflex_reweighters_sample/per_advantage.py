"""``per_advantage``: PER-style priority weights |s|^alpha."""

from __future__ import annotations

import torch

from dataflex_core import Reweighter, actuator_scores, register_reweighter

from ._inputs import finish


@register_reweighter("per_advantage")
class PerAdvantageReweighter(Reweighter):
    """Weights proportional to a power of the score's magnitude, as PER prioritises by |TD error|.

    Paper: Prioritized Experience Replay, proportional variant
    (Schaul et al., arXiv 1511.05952): p_i = (|delta_i| + eps)^alpha; here the
    sample's advantage magnitude (pair with ``advantage_magnitude``) plays
    delta.

    Formula, over valid rows V:
    w_i ∝ (|s_i| / max_V |s| + epsilon)^alpha, then scaled to mean one over V.
    Dividing by the batch maximum first makes ``epsilon`` relative to the
    batch's scale (the |s|^alpha part is scale-free after normalisation
    anyway) and keeps every base <= 1 + epsilon, so no power overflows.
    Inputs: scores (bs,) of any sign and float dtype (the magnitude is used).
    Output: (bs,) float32, 0 on padding and empty rows.
    Edge cases: constant scores (all zero included) give uniform weights;
    alpha = 0 gives uniform weights; non-finite scores raise ``ValueError``.

    :param alpha: priority exponent >= 0 (PER used 0.6).
    :param epsilon: floor >= 0 added to the relative magnitude, so zero-score
        samples keep a small weight.
    """

    accepts_granularity = ("prompt", "response")

    def __init__(self, alpha: float = 0.6, epsilon: float = 0.01, **kwargs):
        super().__init__(**kwargs)
        if not alpha >= 0:
            raise ValueError(f"per_advantage alpha must be >= 0, got {alpha!r}")
        if not epsilon >= 0:
            raise ValueError(f"per_advantage epsilon must be >= 0, got {epsilon!r}")
        self.alpha = float(alpha)
        self.epsilon = float(epsilon)

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        s, valid = actuator_scores(scores, batch, owner="per_advantage", granularity="sample")
        magnitude = torch.where(valid, s.abs(), torch.zeros((), dtype=s.dtype, device=s.device))
        top = magnitude.max()
        relative = torch.where(top > 0, magnitude / top, torch.ones_like(magnitude))
        return finish((relative + self.epsilon).pow(self.alpha), valid)
