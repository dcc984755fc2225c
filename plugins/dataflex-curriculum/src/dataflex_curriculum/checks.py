"""Parameter checks shared by the components: the value seen, what was expected."""

from __future__ import annotations

from typing import Any

import torch


def number(owner: str, name: str, value: Any, low: float, high: float, *, low_open: bool = False) -> float:
    """``value`` as a float in ``[low, high]`` (``(low, high]`` with ``low_open``), else :class:`ValueError`."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    ok = ok and (low < value if low_open else low <= value) and value <= high
    if not ok:
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
        raise ValueError(f"{owner}: {name} must be a number in {interval}, got {value!r}")
    return float(value)


def unit_interval_scores(owner: str, scores: torch.Tensor) -> torch.Tensor:
    """``scores`` as float64, refusing any outside ``[0, 1]`` (this component reads them as solve rates)."""
    values = scores.detach().to(torch.float64)
    if not values.numel():
        return values
    low, high = torch.aminmax(values)  # one pass; the mask below only when something is off (NaN lands there too)
    if not (low >= 0 and high <= 1):
        outside = (values < 0) | (values > 1)
        if outside.any():
            raise ValueError(
                f"{owner} reads scores as solve rates in [0, 1] (score_range), got {int(outside.sum())} outside it "
                f"(e.g. {float(values[outside][0]):.4g}); pair it with a scorer whose score_range is (0, 1)"
            )
    return values
