"""``softmax``: weights proportional to exp(score / temperature)."""

from __future__ import annotations

import torch

from dataflex_core import Reweighter, actuator_scores, register_reweighter

from ._inputs import finish


@register_reweighter("softmax")
class SoftmaxReweighter(Reweighter):
    """Exponential emphasis on high-scoring samples, tempered by ``temperature``.

    Paper: Boltzmann (softmax) prioritisation over samples, as in the
    stochastic prioritisation of Prioritized Experience Replay
    (arXiv 1511.05952); the user guide's example reweighter.

    Formula, over valid rows V (n = |V|):
    w_i = n · exp((s_i − max_V s) / T) / sum_{j in V} exp((s_j − max_V s) / T),
    so the weights have mean one over V. Subtracting the maximum first keeps
    every exponent <= 0: no overflow for scores of any magnitude (1e6 or
    1e-6), and the top sample always has a finite positive weight.
    Inputs: scores (bs,) of any float dtype; the batch's validity mask.
    Output: (bs,) float32, 0 on padding and empty rows.
    Edge cases: constant or tied scores give equal weights; bs=1 gives [1];
    non-finite scores on valid rows raise ``ValueError``.

    :param temperature: T > 0; small T concentrates weight on the top scores,
        large T approaches uniform.
    """

    accepts_granularity = ("prompt", "response")

    def __init__(self, temperature: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        if not temperature > 0:
            raise ValueError(f"softmax temperature must be > 0, got {temperature!r}")
        self.temperature = float(temperature)

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        s, valid = actuator_scores(scores, batch, owner="softmax", granularity="sample")
        neg_inf = torch.full((), float("-inf"), dtype=s.dtype, device=s.device)
        top = torch.where(valid, s, neg_inf).max()
        exponent = torch.where(valid, (s - top) / self.temperature, neg_inf)
        return finish(exponent.exp(), valid)
