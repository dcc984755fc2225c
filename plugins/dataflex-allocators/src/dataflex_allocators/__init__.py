"""DataFlex allocators: how many rollouts each of a step's prompts gets, under a fixed budget.

``mechanism: allocate`` asks a ``pre_rollout`` scorer for each prompt's solve
rate (``solve_rate_posterior``: the ledger's Beta posterior mean) and an
allocator for the counts: ``uniform`` (the baseline), ``knapsack`` (Knapsack
RL, arXiv 2509.25849) or ``variance`` (``p (1 - p)``). Every count is an
integer in ``[n_min, n_max]`` and they sum to the budget
(:func:`dataflex_core.contracts.check_allocation`).
"""

from .knapsack import KnapsackAllocator, knapsack_value
from .solve_rate import SolveRatePosterior
from .uniform import UniformAllocator
from .variance import VarianceAllocator, proportional_shares
from .version import __version__

__all__ = [
    "KnapsackAllocator",
    "SolveRatePosterior",
    "UniformAllocator",
    "VarianceAllocator",
    "__version__",
    "knapsack_value",
    "proportional_shares",
]
