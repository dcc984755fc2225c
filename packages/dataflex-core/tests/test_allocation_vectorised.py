"""The vectorised greedy allocation equals a brute-force optimum and the one-rollout-at-a-time greedy it replaced."""

from __future__ import annotations

import heapq
import itertools

import pytest
import torch

from dataflex_core import greedy_allocation


def heap_greedy(value, num_prompts, budget, n_min, n_max):
    """The previous release's greedy, kept as the reference: one heap pop per spare rollout."""
    counts = torch.full((num_prompts,), n_min, dtype=torch.int64)
    spare = budget - num_prompts * n_min
    cap = spare + n_min if n_max is None else min(n_max, spare + n_min)
    if spare <= 0 or cap <= n_min:
        return counts

    def gain(count, i):
        after = value(torch.full((num_prompts,), count + 1)).double()[i]
        return float(after - value(torch.full((num_prompts,), count)).double()[i])

    heap = [(-gain(n_min, i), n_min, i) for i in range(num_prompts)]
    heapq.heapify(heap)
    for _ in range(spare):
        _, count, i = heapq.heappop(heap)
        counts[i] = count + 1
        if count + 1 < cap:
            heapq.heappush(heap, (-gain(count + 1, i), count + 1, i))
    return counts


def concave(weights, exponents):
    return lambda n: weights * n.double().pow(exponents)


@pytest.mark.parametrize("seed", range(5))
def test_equals_brute_force_optimum_on_small_cases(seed):
    g = torch.Generator().manual_seed(seed)
    n, n_min, n_max, budget = 3, 1, 5, 9
    weights = torch.rand(n, generator=g, dtype=torch.float64)
    value = concave(weights, 0.3 + 0.6 * torch.rand(n, generator=g, dtype=torch.float64))
    best = max(
        (c for c in itertools.product(range(n_min, n_max + 1), repeat=n) if sum(c) == budget),
        key=lambda c: float(value(torch.tensor(c)).sum()),
    )
    counts = greedy_allocation(value, n, budget, n_min, n_max)
    assert float(value(counts).sum()) == pytest.approx(float(value(torch.tensor(best)).sum()), abs=1e-12)
    assert int(counts.sum()) == budget


@pytest.mark.parametrize("seed", range(8))
def test_equals_heap_greedy_on_random_concave_values(seed):
    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(2, 40, (1,), generator=g))
    n_min = int(torch.randint(1, 3, (1,), generator=g))
    budget = n * n_min + int(torch.randint(0, 200, (1,), generator=g))
    n_max = None if seed % 2 else n_min + int(torch.randint(1, 20, (1,), generator=g))
    if n_max is not None and n * n_max < budget:
        budget = n * n_max
    # knapsack-like values: a few prompts with no gain at all (ties), the rest concave with geometric decay
    p = torch.rand(n, generator=g, dtype=torch.float64)
    p[torch.rand(n, generator=g) < 0.4] = 1.0
    value = lambda c: 1.0 - p.pow(c.double()) - (1.0 - p).pow(c.double())  # noqa: E731
    reference = heap_greedy(value, n, budget, n_min, n_max)
    assert torch.equal(greedy_allocation(value, n, budget, n_min, n_max), reference)
    assert torch.equal(greedy_allocation(value, n, budget, n_min, n_max, batched=True), reference)


def test_flat_values_spread_evenly_and_one_hungry_prompt_takes_the_rest():
    flat = lambda c: torch.zeros(len(c), dtype=torch.float64)  # noqa: E731
    assert greedy_allocation(flat, 4, 11, 2, None).tolist() == [3, 3, 3, 2]

    # one prompt gains from every rollout: the levels grow past the first guess until it stops
    def hungry(c):
        return torch.where(torch.arange(len(c)) == 2, c.double().sqrt(), torch.zeros(len(c), dtype=torch.float64))

    assert greedy_allocation(hungry, 4, 200, 2, None).tolist() == [2, 2, 194, 2]
    assert greedy_allocation(hungry, 4, 200, 2, 60).tolist() == [47, 47, 60, 46]
    assert torch.equal(greedy_allocation(hungry, 4, 200, 2, 60), heap_greedy(hungry, 4, 200, 2, 60))


def test_a_nan_gain_is_an_error_naming_the_prompt():
    nan = lambda c: torch.tensor([0.0, float("nan")], dtype=torch.float64) * c  # noqa: E731
    with pytest.raises(ValueError, match="prompt 1"):
        greedy_allocation(nan, 2, 8, 2, None)
