"""``tscl``: Teacher-Student Curriculum Learning, window variant (arXiv 1707.00183).

TSCL samples the tasks on which the student is learning fastest: the learning
progress of a task is the slope of its learning curve, and the teacher samples
by the absolute slope, so a task being *forgotten* (negative slope) is
revisited too. Here a domain's learning curve is its mean signal per training
step (pair it with ``reward_difficulty``), the slope is the least-squares
slope over the steps of the last ``window`` at which the domain was seen, and
the teacher is a Boltzmann distribution over ``|slope|`` mixed with
``epsilon`` uniform exploration. Slopes are divided by the largest one first,
so ``temperature`` does not depend on the reward's scale.
"""

from __future__ import annotations

from typing import Any

import torch

from dataflex_core import register_mixer

from .base import WindowedDomainMixer, _positive_float, softmax_over, with_floor


@register_mixer("tscl")
class TSCLMixer(WindowedDomainMixer):
    """``p = (1 - epsilon) softmax(|slope| / max|slope| / temperature) + epsilon / D``.

    :param window: training steps of the regression window (default 10).
    :param temperature: Boltzmann temperature on the normalised slopes (default 0.5).
    :param epsilon: uniform exploration share (default 0.1).

    A domain with fewer than two steps in the window has no slope yet; it is
    given the largest known ``|slope|`` so that it gets measured.
    """

    def __init__(self, window: int = 10, temperature: float = 0.5, epsilon: float = 0.1, **kwargs: Any) -> None:
        super().__init__(window=window, **kwargs)
        self.temperature = _positive_float("tscl", "temperature", temperature)
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"tscl: epsilon must be in [0, 1], got {epsilon!r}")
        self.epsilon = float(epsilon)

    def slopes(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(slope, known)`` per domain: least-squares slope of signal over steps in the window."""
        steps, means, seen = self.history()
        w = seen.to(torch.float64)  # (H, D)
        x = steps.to(torch.float64).unsqueeze(1)  # (H, 1)
        n = w.sum(0)
        x_mean = (w * x).sum(0) / n.clamp(min=1)
        y_mean = (w * means).sum(0) / n.clamp(min=1)
        dx = (x - x_mean) * w
        sxx = (dx * (x - x_mean)).sum(0)
        sxy = (dx * (means - y_mean)).sum(0)
        known = (n >= 2) & (sxx > 0)
        slope = torch.where(known, sxy / sxx.clamp(min=1e-300), torch.zeros_like(sxy))
        return slope, known

    def propose(self) -> torch.Tensor:
        slope, known = self.slopes()
        progress = slope.abs()
        if known.any():
            progress = torch.where(known, progress, progress[known].max())
        scale = progress.max()
        progress = progress / scale if scale > 0 else torch.zeros_like(progress)
        return with_floor(softmax_over(progress, self.temperature), self.epsilon / progress.shape[0])
