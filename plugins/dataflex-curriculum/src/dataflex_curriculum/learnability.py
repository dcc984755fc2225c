"""``learnability``: draw prompts in proportion to ``p (1 - p)``, the variance of their success.

Under GRPO a prompt teaches only when its responses disagree: a group that
all succeeded or all failed has zero advantage everywhere (DAPO's dynamic
sampling, arXiv 2503.14476, drops such groups after paying for them). For a
prompt solved with probability ``p``, the variance of a response's success is
``p (1 - p)``: zero for prompts always or never solved, largest at ``p = 1/2``.
Sampling for learnability (Foster et al., "Learning to Reason at the
Frontier of Learnability", arXiv 2502.12272) prioritises prompts by exactly
this variance; MoPPS aims near 1/2 too. Over the ``n`` candidates:

``w_i = p_i (1 - p_i)``,  ``q = w / sum(w)``,  ``P = (1 - epsilon) q + epsilon / n``

The ``epsilon`` floor (``exploration``) keeps every prompt drawable: a prompt
judged solved or hopeless is checked again now and then, since the policy
changes. The hard case is every candidate at ``p = 0`` or ``p = 1`` (DAPO's
all-solved / all-failed groups everywhere): the weights are all zero and the
draw is uniform. ``p`` must lie in ``[0, 1]`` (pair with ``solve_rate_ema`` or
``mopps``); a score outside is an error, not silently clipped.
"""

from __future__ import annotations

from typing import Any

import torch

from dataflex_core import Sampler, register_sampler

from .checks import number, unit_interval_scores


def with_floor(q: torch.Tensor, exploration: float) -> torch.Tensor:
    """``(1 - exploration) q + exploration / n``: a distribution whose every entry is at least ``exploration / n``."""
    return torch.mul(q, 1.0 - exploration).add_(exploration / len(q))


@register_sampler("learnability")
class LearnabilitySampler(Sampler):
    """Probabilities ``(1 - epsilon) p(1-p) / sum p(1-p) + epsilon / n`` over candidates with solve rates ``p``.

    :param exploration: ``epsilon`` in ``[0, 1]``, the share spread uniformly (default 0.05; 0 lets prompts
        judged solved or hopeless starve).
    """

    score_range = (0.0, 1.0)

    def __init__(self, exploration: float = 0.05, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.exploration = number("learnability", "exploration", exploration, 0.0, 1.0)

    def act(self, scores: Any, batch: Any, **ctx: Any) -> torch.Tensor:
        p = unit_interval_scores("learnability", scores)
        n = len(p)
        if n == 0:
            return torch.zeros(0, dtype=torch.float64, device=scores.device)
        weight = torch.rsub(p, 1.0).mul_(p)  # p (1 - p)
        total = weight.sum()
        q = weight.div_(total) if total > 0 else torch.full_like(weight, 1.0 / n)
        return q.mul_(1.0 - self.exploration).add_(self.exploration / n).to(scores.device)  # with_floor, in place

    def min_probability(self, num_candidates: int) -> float:
        return self.exploration / num_candidates if num_candidates else 0.0
