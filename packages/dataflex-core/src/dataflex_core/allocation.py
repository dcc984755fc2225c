"""Rollout counts under a budget: the even split every allocator starts from, and the greedy rule of the knapsack.

``mechanism: allocate`` gives each of a step's prompts its own number of
rollouts; the contract on those counts is
:func:`~dataflex_core.contracts.check_allocation`. Two rules recur across
allocators, so they live here once:

- :func:`even_split`: the budget spread as evenly as whole rollouts allow
  (the uniform baseline; every prompt ``rollout.n`` when the budget is the
  batch's prompts times ``rollout.n``);
- :func:`greedy_allocation`: every prompt starts at ``n_min`` and each further
  rollout goes to the prompt whose value gains most from it. For values that
  are concave in the count (each extra rollout is worth no more than the last)
  this is the exact optimum of the knapsack over the budget, the same as
  dynamic programming, in ``O(budget log prompts)``.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

import torch


def even_split(num_prompts: int, budget: int) -> torch.Tensor:
    """``budget`` rollouts over ``num_prompts`` prompts, int64 ``(n,)``: ``budget // n`` each, one more for the
    first ``budget % n`` prompts (in the order given)."""
    if num_prompts < 1:
        raise ValueError(f"even_split needs at least one prompt, got {num_prompts}")
    base, extra = divmod(int(budget), int(num_prompts))
    counts = torch.full((num_prompts,), base, dtype=torch.int64)
    counts[:extra] += 1
    return counts


def greedy_allocation(
    value: Callable[[torch.Tensor], torch.Tensor], num_prompts: int, budget: int, n_min: int, n_max: int | None
) -> torch.Tensor:
    """Counts int64 ``(n,)`` summing to ``budget`` within ``[n_min, n_max]`` that maximise ``sum_i value(n)_i``.

    :param value: maps counts int64 ``(n,)`` to each prompt's value at that count, float ``(n,)``.
    :param n_max: the most rollouts a prompt gets (``None``: the budget is the only cap).

    Starts from ``n_min`` everywhere; each further rollout goes to the largest marginal gain
    ``value(n_i + 1) - value(n_i)``, ties to the prompt with fewer rollouts, then the earlier one (so rollouts
    no prompt gains from, when every value is flat, spread evenly). Exact when ``value`` is concave in the count.
    The caller checks the budget is feasible (:func:`~dataflex_core.contracts.allocation_problem`).
    """
    counts = torch.full((num_prompts,), int(n_min), dtype=torch.int64)
    spare = int(budget) - num_prompts * int(n_min)
    cap = spare + int(n_min) if n_max is None else min(int(n_max), spare + int(n_min))
    if spare <= 0 or cap <= n_min:
        return counts
    # the marginal gains at each count, one batched value call per count reached (so the work grows with the
    # counts handed out, not with the budget times the prompts)
    values = [value(torch.full((num_prompts,), int(n_min), dtype=torch.int64)).to(torch.float64)]
    gains: list[list[float]] = []

    def gain(count: int, i: int) -> float:
        level = count - int(n_min)
        while len(gains) <= level:
            values.append(value(torch.full((num_prompts,), int(n_min) + len(values), dtype=torch.int64)).double())
            gains.append((values[-1] - values[-2]).tolist())
        return gains[level][i]

    heap = [(-gain(int(n_min), i), int(n_min), i) for i in range(num_prompts)]
    heapq.heapify(heap)
    for _ in range(spare):
        _, count, i = heapq.heappop(heap)
        counts[i] = count + 1
        if count + 1 < cap:
            heapq.heappush(heap, (-gain(count + 1, i), count + 1, i))
    return counts
