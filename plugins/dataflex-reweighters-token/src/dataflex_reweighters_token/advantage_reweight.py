"""``advantage_reweight``: damp low-probability tokens, alpha·pi(t) + (1 − alpha)."""

from __future__ import annotations

import torch

from dataflex_core import Reweighter, actuator_scores, register_reweighter

from ._inputs import finish


@register_reweighter("advantage_reweight")
class AdvantageReweightReweighter(Reweighter):
    """Scale each token by alpha·pi(t) + (1 − alpha), so rare tokens stop dominating the update.

    Low-probability tokens have large gradients and crowd out the rest;
    weighting each token's advantage by its own probability restores balance.
    Paper: "Do Not Let Low-Probability Tokens Over-Dominate in RL for LLMs"
    (arXiv 2505.12929), Advantage Reweighting.

    Formula: w_it ∝ alpha · pi_it + (1 − alpha) on valid tokens, scaled to
    mean one over the valid tokens of the batch.
    Inputs: scores (bs, L) = token probabilities pi in [0, 1] (pair with
    ``token_prob``).
    Output: (bs, L) float32, 0 outside valid tokens (response tokens of
    non-padding rows).
    Edge cases: alpha = 0 or constant pi gives uniform weights; alpha = 1 with
    every pi = 0 gives uniform weights; scores outside [0, 1] or non-finite
    raise ``ValueError``.

    :param alpha: mixing weight in [0, 1]; 0 leaves the loss unchanged.
    """

    accepts_granularity = ("token",)
    score_range = (0.0, 1.0)

    def __init__(self, alpha: float = 0.3, **kwargs):
        super().__init__(**kwargs)
        if not 0 <= alpha <= 1:
            raise ValueError(f"advantage_reweight alpha must be in [0, 1], got {alpha!r}")
        self.alpha = float(alpha)

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        prob, valid = actuator_scores(scores, batch, owner="advantage_reweight", granularity="token")
        low, high = prob.aminmax()
        if not (low >= 0 and high <= 1):  # exact check only when some token (maybe an invalid one) is out
            outside = valid & ~((prob >= 0) & (prob <= 1))
            if outside.any():
                seen = prob[outside]
                raise ValueError(
                    f"advantage_reweight reads scores as token probabilities in [0, 1], but "
                    f"{int(outside.sum())} valid score(s) lie outside (min={seen.min().item():.4g}, "
                    f"max={seen.max().item():.4g}); pair it with token_prob"
                )
        if self.alpha == 1.0 and not torch.where(valid, prob, 0.0).sum() > 0:
            return finish(valid.to(torch.float32), valid)  # every pi is 0: no preference, uniform
        return finish(prob.mul(self.alpha).add_(1.0 - self.alpha), valid)
