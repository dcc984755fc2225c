"""The allocators on hand-computed cases: the counts, the budget, n_min / n_max, and the edge cases."""

from __future__ import annotations

import itertools

import pytest
import torch
from dataflex_allocators import (
    KnapsackAllocator,
    SolveRatePosterior,
    UniformAllocator,
    VarianceAllocator,
    knapsack_value,
    proportional_shares,
)

from dataflex_core import Batch, InvalidOutputError, greedy_allocation
from dataflex_core.contracts import check_allocation


def prompts(p: list[float]) -> tuple[torch.Tensor, Batch]:
    """Solve rates as scores, and a prompt batch of that many prompts (as the mechanism builds it)."""
    return torch.tensor(p, dtype=torch.float64), Batch({"prompt_index": torch.arange(len(p))})


def allocate(allocator, p, budget, n_min=2, n_max=None):
    scores, batch = prompts(p)
    counts = allocator.act(scores, batch, budget=budget, n_min=n_min, n_max=n_max)
    # the contract the mechanism applies holds for every case here
    return check_allocation(counts, len(p), budget=budget, n_min=n_min, n_max=n_max, owner="t", step=None).tolist()


def test_uniform_gives_every_prompt_rollout_n_at_the_default_budget_and_spreads_a_remainder_first_come():
    assert allocate(UniformAllocator(), [0.1, 0.9, 0.5, 0.0], budget=4 * 8) == [8, 8, 8, 8]
    assert allocate(UniformAllocator(), [0.1, 0.9, 0.5], budget=11) == [4, 4, 3]
    assert UniformAllocator().min_rollouts(2, 3, 11) == 3


def test_knapsack_value_is_the_papers_formula():
    # value(n, p) = (1 - p^n - (1 - p)^n) * p (1 - p)^2; p = 0.5, n = 2: 0.5 * 0.125
    value = knapsack_value(torch.tensor([0.5, 0.1, 1.0, 0.0]), torch.tensor([2, 3, 5, 5]))
    assert value.tolist() == pytest.approx([0.0625, (1 - 0.001 - 0.729) * 0.1 * 0.81, 0.0, 0.0])
    alone = knapsack_value(torch.tensor([0.5]), torch.tensor([3]), info_gain=False)
    assert alone.tolist() == pytest.approx([0.75])


def test_knapsack_without_info_gain_maximises_the_groups_with_signal():
    # gains (p=.5) .25 .125 .0625; (p=.1) .09 .0738; (p=1) 0 -> the 3 spare rollouts: .25, .125, .09
    assert allocate(KnapsackAllocator(info_gain=False), [0.5, 0.1, 1.0], budget=9) == [4, 3, 2]


def test_knapsack_with_info_gain_weighs_each_prompt_by_p_1_minus_p_squared():
    # InfoGain .125 (p=.5), .081 (p=.1): gains .03125 .015625 .0078125 beat .00729 -> all three to p=.5
    assert allocate(KnapsackAllocator(), [0.5, 0.1, 1.0], budget=9) == [5, 2, 2]


def test_knapsack_respects_n_max_and_gives_the_rest_to_the_next_best():
    assert allocate(KnapsackAllocator(), [0.5, 0.1, 1.0], budget=9, n_max=4) == [4, 3, 2]


def test_knapsack_spreads_evenly_when_no_prompt_gains_p_in_0_1():
    # every value is 0 at every n: ties go to the prompt with fewer rollouts, then the earlier one
    assert allocate(KnapsackAllocator(), [0.0, 1.0, 1.0], budget=10) == [4, 3, 3]


def test_knapsack_greedy_equals_brute_force_on_small_cases():
    p = torch.tensor([0.3, 0.7, 0.05, 0.5])
    budget, n_min, n_max = 14, 2, 6
    best_value = -1.0
    for counts in itertools.product(range(n_min, n_max + 1), repeat=4):
        if sum(counts) == budget:
            value = float(knapsack_value(p, torch.tensor(counts)).sum())
            if value > best_value + 1e-12:
                best_value = value
    got = greedy_allocation(lambda n: knapsack_value(p, n), 4, budget, n_min, n_max)
    assert float(knapsack_value(p, got).sum()) == pytest.approx(best_value)


def test_variance_shares_the_spare_budget_by_p_1_minus_p():
    # spare 8 over weights .25 .25 0 0
    assert allocate(VarianceAllocator(), [0.5, 0.5, 0.0, 1.0], budget=16) == [6, 6, 2, 2]
    # weights .25, .09, .16 -> 6 spare: 3.0, 1.08, 1.92 -> floors 3, 1, 1; the remainder .92 to the third
    assert allocate(VarianceAllocator(), [0.5, 0.1, 0.8], budget=12) == [5, 3, 4]


def test_variance_fills_the_caps_first_and_shares_their_excess_again():
    # spare 8 by .25 .25 .09: 3.39 3.39 1.22; cap 3 extra (n_max 5) -> 3, 3 and the last gets 2
    assert allocate(VarianceAllocator(), [0.5, 0.5, 0.1], budget=14, n_max=5) == [5, 5, 4]


def test_variance_spreads_evenly_when_every_weight_is_zero():
    # spare 5 over three: 1.67 each -> floors 1, 1, 1 and the remainder 2 to the first two
    assert allocate(VarianceAllocator(), [0.0, 1.0, 0.0], budget=11) == [4, 4, 3]


def test_proportional_shares_sum_to_the_total_under_caps():
    shares = proportional_shares(torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64), 7, torch.tensor([2, 9, 9]))
    assert shares.tolist() == [2, 3, 2] and int(shares.sum()) == 7


def test_solve_rate_posterior_is_the_beta_mean_and_unseen_prompts_score_one_half():
    batch = Batch(
        {"rollouts": torch.tensor([0, 4, 4]), "successes": torch.tensor([0.0, 4.0, 1.0], dtype=torch.float64)}
    )
    assert SolveRatePosterior().score(batch, 0).tolist() == pytest.approx([0.5, 5 / 6, 2 / 6])


def test_allocators_refuse_scores_that_are_not_solve_rates():
    scores, batch = prompts([0.5, 1.5])
    for allocator in (KnapsackAllocator(), VarianceAllocator()):
        with pytest.raises(InvalidOutputError, match="outside \\[0, 1\\].*solve_rate_posterior"):
            allocator.act(scores, batch, budget=6, n_min=2, n_max=None)


def test_knapsack_refuses_a_non_boolean_info_gain():
    with pytest.raises(ValueError, match="info_gain must be true or false"):
        KnapsackAllocator(info_gain="yes")
