"""``threshold_band``: keep rows whose score lies inside a band.

Paired with the ``group_solve_rate`` scorer this is DAPO-style dynamic
sampling (arXiv 2503.14476): with the default open band ``0 < p < 1`` it drops
groups that all solved or all failed, whose GRPO advantages are zero and which
only dilute the batch. Both bounds are explicit, and whether each one is
inclusive is a parameter, so ``[0.2, 0.8]`` and ``(0, 1)`` are both a
configuration away.
"""

from __future__ import annotations

import torch

from dataflex_core import Selector, actuator_scores, register_selector


@register_selector("threshold_band")
class ThresholdBandSelector(Selector):
    """Keep valid rows with ``low < score < high`` (``<=`` where a bound is inclusive).

    :param low: lower bound of the band (default 0.0).
    :param high: upper bound of the band (default 1.0).
    :param low_inclusive: keep rows whose score equals ``low`` (default False).
    :param high_inclusive: keep rows whose score equals ``high`` (default False).
    :param recompute_advantage: ask the host to recompute group advantages on
        the kept rows (default False: dropping whole groups leaves the
        survivors' group statistics unchanged).

    Returns a bool mask ``(bs,)``; padding and empty rows are never kept.
    """

    accepts_granularity = ("prompt", "response")
    #: A band on the scores keeps every row of a group whose rows share a score, or none: filter can admit with it.
    admits_groups = True

    def __init__(
        self,
        low: float = 0.0,
        high: float = 1.0,
        low_inclusive: bool = False,
        high_inclusive: bool = False,
        recompute_advantage: bool = False,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if not low <= high:
            raise ValueError(f"threshold_band: low={low!r} must not exceed high={high!r}")
        self.low = float(low)
        self.high = float(high)
        self.low_inclusive = bool(low_inclusive)
        self.high_inclusive = bool(high_inclusive)
        self.recompute_advantage = bool(recompute_advantage)

    def act(self, scores, batch, **ctx) -> torch.Tensor:
        values, valid = actuator_scores(scores, batch, owner=self.describe(), granularity="sample", dtype=torch.float64)
        # Bounds are rounded to the scores' dtype first, so a float32 score of 0.2
        # equals the bound 0.2 instead of exceeding it by the rounding error.
        dtype = scores.dtype if scores.is_floating_point() else torch.float64
        low = torch.tensor(self.low, dtype=dtype).to(values)
        high = torch.tensor(self.high, dtype=dtype).to(values)
        above = values >= low if self.low_inclusive else values > low
        below = values <= high if self.high_inclusive else values < high
        return valid & above & below
