"""``variance``: the rollouts beyond ``n_min`` in proportion to each prompt's reward variance ``p (1 - p)``.

A binary reward with solve rate ``p`` has variance ``p (1 - p)``: zero for a
prompt always or never solved, largest at ``p = 1/2``. The GRPO signal of a
prompt's group grows with that spread, so this allocator gives every prompt
``n_min`` rollouts and shares the rest of the budget in proportion to
``w_i = p_i (1 - p_i)`` (the weight of the ``learnability`` curriculum, and
of the variance-based allocations surveyed in Knapsack RL, arXiv 2509.25849):

``n_i = n_min + share_i``,  ``share_i`` proportional to ``w_i``, capped at ``n_max - n_min``

the caps filled first and their excess shared again among the others, the
fractions rounded by largest remainder (ties to the earlier prompt), so the
counts sum to the budget. Edge cases: ``p`` in ``{0, 1}`` gives weight 0 and
exactly ``n_min``; when every weight is 0 the spare budget is spread evenly;
an unseen prompt under ``solve_rate_posterior`` scores 0.5, the largest weight.
"""

from __future__ import annotations

from typing import Any

import torch

from dataflex_core import Allocator, register_allocator

from .rates import solve_rates


def proportional_shares(weights: torch.Tensor, total: int, caps: torch.Tensor) -> torch.Tensor:
    """Whole shares int64 ``(n,)`` of ``total`` in proportion to ``weights``, each at most its cap.

    Requires ``caps.sum() >= total``. Zero total weight shares evenly among the prompts below their cap.
    """
    n = len(weights)
    shares = torch.zeros(n, dtype=torch.float64)
    fixed = torch.zeros(n, dtype=torch.bool)
    left = float(total)
    while left > 1e-9:
        free = ~fixed
        w = torch.where(free, weights, torch.zeros((), dtype=torch.float64))
        if float(w.sum()) <= 0:
            w = free.to(torch.float64)
        proposal = left * w / w.sum()
        over = free & (shares + proposal > caps)
        if not bool(over.any()):
            shares += proposal
            break
        left -= float((caps[over] - shares[over]).sum())
        shares[over] = caps[over].to(torch.float64)
        fixed |= over
    whole = shares.floor().to(torch.int64)
    rest = int(total) - int(whole.sum())
    if rest > 0:
        room = whole < caps
        remainder = torch.where(room, shares - whole, torch.full((), -1.0, dtype=torch.float64))
        order = sorted(range(n), key=lambda i: (-float(remainder[i]), i))
        for i in [i for i in order if bool(room[i])][:rest]:
            whole[i] += 1
    return whole


@register_allocator("variance")
class VarianceAllocator(Allocator):
    """``n_min`` each, the rest in proportion to ``p (1 - p)``; scores are solve rates in ``[0, 1]``.

    ``n_i = n_min + share_i`` with ``share_i`` proportional to ``p_i (1 - p_i)``, at most ``n_max - n_min``;
    ``p`` in ``{0, 1}`` keeps ``n_min``, and all-zero weights share the spare budget evenly.
    """

    score_range = (0.0, 1.0)

    def act(self, scores: Any, batch: Any, *, budget: int, n_min: int, n_max: int | None, **ctx: Any) -> torch.Tensor:
        p = solve_rates("variance", scores, len(batch))
        num = len(p)
        spare = int(budget) - num * int(n_min)
        cap = spare if n_max is None else int(n_max) - int(n_min)
        caps = torch.full((num,), cap, dtype=torch.int64)
        return int(n_min) + proportional_shares(p * (1.0 - p), spare, caps)
