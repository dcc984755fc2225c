"""``topk_fraction``: keep a fixed fraction of the batch, best scores first.

A batch-level budget (rather than a per-group one): with an advantage or
difficulty scorer it keeps the rows that carry the most signal, and the host
renormalises the kept mask so the step size does not shrink with the batch.
"""

from __future__ import annotations

import math

import torch

from dataflex_core import Selector, actuator_scores, register_selector


@register_selector("topk_fraction")
class TopKFractionSelector(Selector):
    """Keep ``ceil(fraction * n_valid)`` valid rows with the highest (or lowest) scores.

    :param fraction: share of the valid rows to keep, in ``(0, 1]`` (default 0.5).
    :param largest: keep the highest scores (default) or, if False, the lowest.
    :param recompute_advantage: ask the host to recompute group advantages on
        the kept rows (default False).

    Ties go to the lower row index. Returns a bool mask ``(bs,)``.
    """

    accepts_granularity = ("prompt", "response")

    def __init__(self, fraction: float = 0.5, largest: bool = True, recompute_advantage: bool = False, **kwargs):
        super().__init__(**kwargs)
        if isinstance(fraction, bool) or not 0.0 < float(fraction) <= 1.0:
            raise ValueError(f"topk_fraction: fraction must be in (0, 1], got {fraction!r}")
        self.fraction = float(fraction)
        self.largest = bool(largest)
        self.recompute_advantage = bool(recompute_advantage)

    def keep_count(self, num_valid: int) -> int:
        """Rows kept out of ``num_valid`` (at least one when any row is valid)."""
        # The small tolerance keeps 0.3 * 10 at 3 despite float rounding.
        return min(num_valid, max(1, math.ceil(self.fraction * num_valid - 1e-9))) if num_valid else 0

    def act(self, scores, batch, **ctx) -> torch.Tensor:
        values, valid = actuator_scores(scores, batch, owner=self.describe(), granularity="sample", dtype=torch.float64)
        fill = float("-inf") if self.largest else float("inf")
        keyed = torch.where(valid, values, torch.full_like(values, fill))
        order = torch.sort(keyed, descending=self.largest, stable=True).indices
        keep = torch.zeros_like(valid)
        keep[order[: self.keep_count(int(valid.sum()))]] = True
        return keep & valid
