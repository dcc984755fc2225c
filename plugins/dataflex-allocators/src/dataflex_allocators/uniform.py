"""``uniform``: the baseline, the budget spread evenly (every prompt ``rollout.n`` at the default budget)."""

from __future__ import annotations

from typing import Any

import torch

from dataflex_core import Allocator, even_split, register_allocator


@register_allocator("uniform")
class UniformAllocator(Allocator):
    """``budget // n`` rollouts each, one more for the first ``budget % n`` prompts; the scores are not read.

    With the default budget (the batch's prompts times ``rollout.n``) every prompt gets ``rollout.n``: the
    framework's own run, so an allocate run with ``uniform`` is the baseline to compare the others with.
    """

    def act(self, scores: Any, batch: Any, *, budget: int, n_min: int, n_max: int | None, **ctx: Any) -> torch.Tensor:
        return even_split(len(batch), budget)

    def min_rollouts(self, n_min: int, num_prompts: int, budget: int) -> int:
        return int(budget) // int(num_prompts)
