"""Checks of allocators, the components of ``mechanism: allocate``: their counts meet core's contract.

An allocator's promises are about the budget: one integer count per prompt,
summing to the budget exactly, each within ``[n_min, n_max]``
(:func:`dataflex_core.contracts.check_allocation`, the rule the host's step
applies too), and never below the floor it declares
(:meth:`~dataflex_core.Allocator.min_rollouts`), under budgets that divide
evenly or not and bounds that bind; its state survives a checkpoint.
"""

from __future__ import annotations

import torch

from dataflex_core import InvalidOutputError
from dataflex_core.contracts import allocation_problem, check_allocation

from .checks_common import resumed as restored
from .prompt_probe import ROLLOUTS_PER_PROMPT, Budget, PromptProbe


def _who(probe: PromptProbe) -> str:
    return f"allocator {probe.subject.name!r}"


def budgets(num_prompts: int) -> list[Budget]:
    """The budgets every allocator is certified under: the default, one with a remainder, binding bounds."""
    n = num_prompts
    cases = [
        Budget(n * ROLLOUTS_PER_PROMPT),
        Budget(n * ROLLOUTS_PER_PROMPT + max(n // 2, 1) if n > 1 else n * ROLLOUTS_PER_PROMPT + 1),
        Budget(n * ROLLOUTS_PER_PROMPT, n_min=3, n_max=5),
        Budget(n * 2, n_min=2, n_max=2),  # the only allocation: every prompt n_min
        Budget(n * 2 + 7, n_min=2, n_max=None),
    ]
    return [b for b in cases if allocation_problem(n, b.budget, b.n_min, b.n_max) is None]


def _counts(probe: PromptProbe, budget: Budget) -> torch.Tensor:
    sample = probe.sample()
    out = probe.allocate(probe.component(), sample, budget)
    try:
        return check_allocation(out, len(sample), **budget.kwargs(), owner=_who(probe), step=None)
    except InvalidOutputError as exc:
        raise probe.fail(f"under {budget}: {exc}") from exc


def check_allocation_meets_the_budget(probe: PromptProbe) -> None:
    """Counts are whole numbers, one per prompt, summing to the budget and within ``[n_min, n_max]``."""
    for budget in budgets(len(probe.sample())):
        _counts(probe, budget)


def check_no_prompt_below_the_declared_floor(probe: PromptProbe) -> None:
    """Every prompt gets at least ``min_rollouts(n_min, n, budget)``, the floor the allocator declares."""
    n = len(probe.sample())
    for budget in budgets(n):
        floor = int(probe.instance().min_rollouts(budget.n_min, n, budget.budget))
        if floor < budget.n_min:
            raise probe.fail(
                f"min_rollouts({budget.n_min}, {n}, {budget.budget}) = {floor}, below n_min: the declared floor "
                "is at least n_min"
            )
        sample = probe.sample()
        counts = probe.readable(probe.allocate(probe.component(), sample, budget), sample)
        below = counts < floor
        if below.any():
            first = int(below.nonzero()[0])
            raise probe.fail(
                f"under {budget}, {int(below.sum())} of {n} prompts get fewer rollouts than the declared floor "
                f"min_rollouts = {floor} (e.g. {int(counts[first])} at {first})"
            )


def check_allocation_state_round_trip(probe: PromptProbe) -> None:
    """``state_dict`` saved as a checkpoint is and loaded into a fresh instance gives the same counts."""
    sample = probe.sample()
    used = probe.component()
    probe.allocate(used, sample)  # a step of use, whatever the allocator keeps of it
    resumed = restored(probe, used)
    before, after = probe.allocate(used, sample), probe.allocate(resumed, sample)
    if not torch.equal(torch.as_tensor(before).cpu(), torch.as_tensor(after).cpu()):
        raise probe.fail(
            f"counts after restoring state_dict() are {torch.as_tensor(after).tolist()}, the instance it came from "
            f"gives {torch.as_tensor(before).tolist()}; a resumed allocator must allocate as the one it resumes"
        )
