"""``knapsack``: rollouts where they most likely give a GRPO signal (Knapsack RL, arXiv 2509.25849).

A GRPO group of ``n`` responses to a prompt with solve rate ``p`` teaches
nothing when every response gets the same reward; with binary rewards that
happens with probability ``p^n + (1 - p)^n``. Knapsack RL (Li et al., 2025)
treats each prompt's rollouts as a knapsack item: its *value* is the
probability of a non-zero gradient times how much a gradient on that prompt
is worth,

``value(n, p) = (1 - p^n - (1 - p)^n) * InfoGain(p)``,  ``InfoGain(p) = p (1 - p)^2``

(the paper's approximation of the expected rise in the success rate; with
``info_gain=False`` the value is the non-zero-gradient probability alone),
its *cost* is ``n`` rollouts, and the step's rollout budget is the knapsack's
capacity. ``value`` is concave in ``n`` (each further rollout adds
``p^n (1 - p) + (1 - p)^n p`` times ``InfoGain(p)``, which shrinks with ``n``),
so giving each rollout to the prompt whose value grows most
(:func:`~dataflex_core.greedy_allocation`) is the exact optimum the paper
reaches by dynamic programming.

``p`` is the scorer's solve rate (``solve_rate_posterior``: the ledger's Beta
posterior mean). Edge cases: a prompt with ``p`` in ``{0, 1}`` has value 0 at
every ``n`` and keeps ``n_min`` (its rollouts move nothing); an unseen prompt
scores the prior mean 0.5 under ``solve_rate_posterior``, where the
non-zero-gradient probability is highest, so it is explored; when no prompt
gains from another rollout (every ``p`` in ``{0, 1}``) the spare budget is
spread evenly.
"""

from __future__ import annotations

from typing import Any

import torch

from dataflex_core import Allocator, greedy_allocation, register_allocator

from .rates import solve_rates


def knapsack_value(p: torch.Tensor, n: torch.Tensor, *, info_gain: bool = True) -> torch.Tensor:
    """Knapsack RL's value of ``n`` rollouts for solve rates ``p`` (float64, elementwise)."""
    p = p.to(torch.float64)
    n = n.to(torch.float64)
    nonzero = 1.0 - p.pow(n) - (1.0 - p).pow(n)
    return nonzero * (p * (1.0 - p) ** 2) if info_gain else nonzero


@register_allocator("knapsack")
class KnapsackAllocator(Allocator):
    """Greedy (exact) knapsack over the budget with Knapsack RL's value; scores are solve rates in ``[0, 1]``.

    :param info_gain: weigh the non-zero-gradient probability by ``p (1 - p)^2`` (the paper's value);
        False maximises the expected number of groups with a GRPO signal alone.
    """

    score_range = (0.0, 1.0)

    def __init__(self, info_gain: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not isinstance(info_gain, bool):
            raise ValueError(f"knapsack: info_gain must be true or false, got {info_gain!r}")
        self.info_gain = info_gain

    def act(self, scores: Any, batch: Any, *, budget: int, n_min: int, n_max: int | None, **ctx: Any) -> torch.Tensor:
        p = solve_rates("knapsack", scores, len(batch))
        return greedy_allocation(
            lambda n: knapsack_value(p, n, info_gain=self.info_gain), len(p), budget, n_min, n_max, batched=True
        )
