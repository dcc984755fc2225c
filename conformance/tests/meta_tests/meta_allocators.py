"""Allocators for the meta tests: one that meets the contract, and ones that each break one promise."""

from __future__ import annotations

import torch

from dataflex_core import Allocator, even_split


class GoodEven(Allocator):
    """The budget split evenly: meets every promise."""

    name = "good_even"

    def act(self, scores, batch, *, budget, n_min, n_max, **ctx):
        return even_split(len(batch), budget)

    def min_rollouts(self, n_min, num_prompts, budget):
        return budget // num_prompts


class OneShort(Allocator):
    """Even split less one rollout on the first prompt above n_min (or one more): breaks the budget only."""

    name = "broken_one_short"

    def act(self, scores, batch, *, budget, n_min, n_max, **ctx):
        counts = even_split(len(batch), budget)
        room = (counts > n_min).nonzero()
        if len(room):
            counts[int(room[0])] -= 1
        else:  # every prompt at n_min: one too many, still above the floor
            counts[0] += 1
        return counts


class PromisesTooMuch(Allocator):
    """Declares a floor of n_min + 1 but gives the spare to the first prompt, leaving others at n_min."""

    name = "broken_floor"

    def act(self, scores, batch, *, budget, n_min, n_max, **ctx):
        counts = torch.full((len(batch),), n_min, dtype=torch.int64)
        spare = budget - int(counts.sum())
        cap = spare + n_min if n_max is None else n_max
        for i in range(len(batch)):
            take = min(spare, cap - n_min)
            counts[i] += take
            spare -= take
        return counts

    def min_rollouts(self, n_min, num_prompts, budget):
        return n_min + 1 if budget >= num_prompts * (n_min + 1) else n_min


class Forgetful(Allocator):
    """The spare rollouts go to the prompt its call count points at, a count it never saves."""

    name = "broken_forgetful"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.calls = 0

    def act(self, scores, batch, *, budget, n_min, n_max, **ctx):
        n = len(batch)
        counts = torch.full((n,), n_min, dtype=torch.int64)
        spare, i = budget - n * n_min, self.calls % n
        self.calls += 1
        cap = spare if n_max is None else n_max - n_min
        while spare > 0:
            take = min(spare, cap - int(counts[i] - n_min))
            counts[i] += take
            spare -= take
            i = (i + 1) % n
        return counts


#: Each broken allocator and the one check it must fail.
BROKEN_ALLOCATORS = {
    OneShort: "check_allocation_meets_the_budget",
    PromisesTooMuch: "check_no_prompt_below_the_declared_floor",
    Forgetful: "check_allocation_state_round_trip",
}
