"""Rollout counts under a budget: the even split every allocator starts from, and the greedy rule of the knapsack.

Two rules recur across allocators (``mechanism: allocate``; the contract is
:func:`~dataflex_core.contracts.check_allocation`), so they live here once.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def even_split(num_prompts: int, budget: int) -> torch.Tensor:
    """``budget`` rollouts over ``num_prompts`` prompts, int64 ``(n,)``: ``budget // n`` each, one more for the first
    ``budget % n`` prompts (in the order given)."""
    if num_prompts < 1:
        raise ValueError(f"even_split needs at least one prompt, got {num_prompts}")
    base, extra = divmod(int(budget), int(num_prompts))
    counts = torch.full((num_prompts,), base, dtype=torch.int64)
    counts[:extra] += 1
    return counts


def greedy_allocation(
    value: Callable[[torch.Tensor], torch.Tensor],
    num_prompts: int,
    budget: int,
    n_min: int,
    n_max: int | None,
    *,
    batched: bool = False,
) -> torch.Tensor:
    """Counts int64 ``(n,)`` summing to ``budget`` within ``[n_min, n_max]`` that maximise ``sum_i value(n)_i``.

    :param value: maps counts int64 ``(n,)`` to each prompt's value at that count, float ``(n,)``.
    :param n_max: the most rollouts a prompt gets (``None``: the budget is the only cap).
    :param batched: ``value`` also maps counts ``(levels, n)`` to values ``(levels, n)``, so the levels are evaluated in
        one call per growth.

    The spare rollouts go to the largest marginal gains, ties to the prompt with fewer rollouts, then the earlier one;
    exact when ``value`` is concave in the count. The caller checks the budget is feasible. The gains of the first
    levels are sorted once; only prompts that took every level get more (doubling), so memory stays
    ``prompts x levels``.

    :raises ValueError: ``value`` gave a NaN gain (named with the prompt and count).
    """
    n, n_min = int(num_prompts), int(n_min)
    counts = torch.full((n,), n_min, dtype=torch.int64)
    spare = int(budget) - n * n_min
    cap = spare + n_min if n_max is None else min(int(n_max), spare + n_min)
    if spare <= 0 or cap <= n_min:
        return counts
    max_levels = cap - n_min
    target = min(max_levels, -(-spare // n) + 1)
    previous = value(torch.full((n,), n_min, dtype=torch.int64)).to(torch.float64)
    active = torch.arange(n)
    gains: list[torch.Tensor] = []
    owners: list[torch.Tensor] = []
    done = 0
    while True:
        if batched and target > done:
            counts_grid = torch.arange(n_min + done + 1, n_min + target + 1, dtype=torch.int64).unsqueeze(1)
            grid = value(counts_grid.expand(target - done, n)).to(torch.float64)
        for level in range(done, target):
            if batched:
                current = grid[level - done]
            else:
                current = value(torch.full((n,), n_min + level + 1, dtype=torch.int64)).to(torch.float64)
            gain = (current - previous)[active]
            if bool(gain.isnan().any()):
                bad = int(active[gain.isnan()][0])
                count = n_min + level + 1
                raise ValueError(f"the allocation value gave a NaN gain for prompt {bad} at {count} rollouts")
            gains.append(gain)
            owners.append(active)
            previous = current
        done = target
        flat, owner = torch.cat(gains), torch.cat(owners)
        # stable descending sort: equal gains keep the concatenation order, which is level-major, prompt-minor
        order = torch.sort(flat, descending=True, stable=True).indices[:spare]
        taken = torch.bincount(owner[order], minlength=n)
        saturated = torch.nonzero(taken == target).flatten()
        if len(saturated) == 0 or target >= max_levels:
            return counts + taken
        active, target = saturated, min(max_levels, 2 * target)
