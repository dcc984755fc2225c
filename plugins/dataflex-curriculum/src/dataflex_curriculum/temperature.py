"""``temperature``: draw prompts by a softmax of their scores at a temperature.

The plainest sampler, Boltzmann sampling: a prompt's probability grows
exponentially with its score. Over the ``n`` candidates with scores ``s``:

``q = softmax(s / T)``,  ``P = (1 - epsilon) q + epsilon / n``

A high temperature ``T`` flattens the draw towards uniform; a low one
concentrates it on the top-scored prompts (a prompt whose probability
exceeds ``1 / B`` appears more than once in a batch of ``B`` prompts, so keep
``T`` moderate for a varied batch). Any finite scores work: the softmax is
taken after subtracting the largest score, so huge scores do not overflow.
Scores far apart make the softmax underflow to exact zeros for the
low-scored prompts; the ``epsilon`` floor (``exploration``) keeps every
prompt drawable (with ``exploration: 0`` such prompts can starve). Equal
scores give a uniform draw.
"""

from __future__ import annotations

from typing import Any

import torch

from dataflex_core import Sampler, register_sampler

from .checks import number
from .learnability import with_floor


@register_sampler("temperature")
class TemperatureSampler(Sampler):
    """Probabilities ``(1 - epsilon) softmax(scores / T) + epsilon / n``.

    :param temperature: ``T`` > 0 (default 1.0).
    :param exploration: ``epsilon`` in ``[0, 1]``, the share spread uniformly (default 0.05).
    """

    def __init__(self, temperature: float = 1.0, exploration: float = 0.05, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.temperature = number("temperature", "temperature", temperature, 0.0, float("inf"), low_open=True)
        self.exploration = number("temperature", "exploration", exploration, 0.0, 1.0)

    def act(self, scores: Any, batch: Any, **ctx: Any) -> torch.Tensor:
        values = scores.detach().to(torch.float64)
        if values.numel() == 0:
            return torch.zeros(0, dtype=torch.float64, device=scores.device)
        q = torch.softmax(values / self.temperature, dim=0)
        return with_floor(q, self.exploration).to(scores.device)

    def min_probability(self, num_candidates: int) -> float:
        return self.exploration / num_candidates if num_candidates else 0.0
