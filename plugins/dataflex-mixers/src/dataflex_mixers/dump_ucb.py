"""``dump_ucb``: DUMP's distribution-level UCB curriculum (arXiv 2504.09710).

DUMP treats each data distribution as a bandit arm whose value is its
expected absolute advantage (a distribution with large ``|A|`` still has much
to teach), adds a UCB exploration bonus from how often the arm was pulled,
and samples distributions by a softmax over those UCB scores:

``UCB_d = mean|A|_d + c * sqrt(2 ln N / n_d)``,  ``p = softmax(UCB / tau)``

where ``n_d`` are the real per-domain visit counts (valid rows observed from
domain ``d`` so far) and ``N = sum n_d``. ``mean|A|_d`` is the domain's mean
absolute signal per step over the last ``window`` steps (the paper uses a
window of recent samples; here it is measured in steps). Pair it with the
``advantage_magnitude`` scorer; the absolute value of the signal is taken,
so a signed advantage scorer works too.
"""

from __future__ import annotations

from typing import Any

import torch

from dataflex_core import register_mixer

from .base import WindowedDomainMixer, _positive_float, softmax_over


@register_mixer("dump_ucb")
class DumpUCBMixer(WindowedDomainMixer):
    """Softmax over ``mean|A|_d + c sqrt(2 ln N / n_d)``.

    :param exploration: ``c``, the weight of the UCB bonus (default 1.0).
    :param temperature: ``tau`` of the softmax (default 0.1).
    :param window: training steps averaged into ``mean|A|_d`` (default 10).

    Domains never visited (``n_d = 0``) have an infinite bonus: they share
    all the mass until each has been visited, as UCB plays every arm once.
    """

    def __init__(self, exploration: float = 1.0, temperature: float = 0.1, window: int = 10, **kwargs: Any) -> None:
        super().__init__(window=window, **kwargs)
        if isinstance(exploration, bool) or not isinstance(exploration, (int, float)) or exploration < 0:
            raise ValueError(f"dump_ucb: exploration must be a number >= 0, got {exploration!r}")
        self.exploration = float(exploration)
        self.temperature = _positive_float("dump_ucb", "temperature", temperature)

    def domain_signal(self, scores, batch, ctx):
        # DUMP's value is the expected *absolute* advantage: take |.| per row, then average.
        return super().domain_signal(scores.abs() if isinstance(scores, torch.Tensor) else scores, batch, ctx)

    def ucb_scores(self) -> torch.Tensor:
        """``mean|A|_d + c sqrt(2 ln N / n_d)`` per domain (``inf`` for unvisited domains)."""
        value, _ = self.window_mean()
        n = self.visits
        total = n.sum()
        bonus = self.exploration * torch.sqrt(2.0 * torch.log(total.clamp(min=1.0)) / n.clamp(min=1.0))
        return torch.where(n > 0, value + bonus, torch.full_like(value, float("inf")))

    def propose(self) -> torch.Tensor:
        ucb = self.ucb_scores()
        unvisited = torch.isinf(ucb)
        if unvisited.any():
            return unvisited.to(torch.float64) / unvisited.sum()
        return softmax_over(ucb, self.temperature)
