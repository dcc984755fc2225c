"""Timing side by side: every figure is a ratio of DataFlex's side to a baseline measured in the same run.

Absolute times on a shared machine drift by tens of percent between minutes, so the two sides alternate call by
call (:func:`measure_interleaved`), and three ratios read the samples, each for one kind of noise:

- :meth:`Timings.paired_ratio`, the median of each round's ratio: a burst of load lasting a few rounds slows both
  calls of those rounds, so it moves their ratio far less than either side's median;
- :meth:`Timings.trimmed_ratio`, of trimmed means: where one call's time is bimodal (a fast and a slow cluster, as
  verl's host step is beside TransferQueue's storage actor), a median lands in one cluster or the other on a sample
  or two, while a mean weighs each cluster by how often a call lands there, what a run pays over its steps;
- :func:`balanced_ratio`, for whole training runs: two runs, DataFlex on the odd steps of one and the even steps of
  the other, each step with DataFlex paired with its neighbour without. A factor that makes odd steps slower than
  even ones reads as ``cost * p`` in one run and ``cost / p`` in the other; the geometric mean of the two runs'
  medians cancels it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Fresh:
    """``run(setup())`` with only ``run`` timed: each call gets inputs of its own, built before the clock starts (a
    host reads a new batch every step, so nothing derived from the last call's tensors can be reused)."""

    run: Callable[[Any], object]
    setup: Callable[[], Any]


@dataclass
class Timings:
    """Seconds of each timed call, per name, warm-up rounds left out."""

    samples: dict[str, list[float]] = field(default_factory=dict)

    def median(self, name: str) -> float:
        return statistics.median(self.samples[name])

    def paired_ratio(self, numerator: str, denominator: str) -> float:
        """The median of the per-round ratios ``numerator / denominator``."""
        pairs = zip(self.samples[numerator], self.samples[denominator], strict=True)
        return statistics.median(a / b if b > 0 else float("inf") for a, b in pairs)

    def trimmed_mean(self, name: str, trim: float = 0.1) -> float:
        """The mean without ``int(n * trim)`` samples at each end (a pre-empted call left out)."""
        values = sorted(self.samples[name])
        cut = int(len(values) * trim)
        return statistics.fmean(values[cut : len(values) - cut])

    def trimmed_ratio(self, numerator: str, denominator: str, trim: float = 0.1) -> float:
        return self.trimmed_mean(numerator, trim) / self.trimmed_mean(denominator, trim)


def measure_interleaved(
    functions: Mapping[str, Callable[[], object] | Fresh],
    *,
    reps: int,
    warmup: int = 1,
    sync: Callable[[], None] = lambda: None,
) -> Timings:
    """Run each function once per round, in the mapping's order (the baseline first), ``warmup`` untimed rounds then
    ``reps`` timed ones. ``sync`` runs before each clock read (a device's queued work). A call's result is released
    after the clock stops, as a host keeps a step's outputs beyond the step."""
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    timings = Timings({name: [] for name in functions})
    for round_index in range(warmup + reps):
        for name, fn in functions.items():
            argument = fn.setup() if isinstance(fn, Fresh) else None
            sync()
            start = time.perf_counter()
            result = fn.run(argument) if isinstance(fn, Fresh) else fn()
            sync()
            elapsed = time.perf_counter() - start
            del result, argument
            if round_index >= warmup:
                timings.samples[name].append(elapsed)
    return timings


def run_medians(runs: Sequence[Sequence[tuple[float, float]]]) -> list[float]:
    """Each run's median ``with / without`` over its pairs of neighbouring steps (runs without a pair left out)."""
    return [statistics.median(on / off for on, off in pairs) for pairs in runs if pairs]


def balanced_ratio(runs: Sequence[Sequence[tuple[float, float]]]) -> float:
    """The geometric mean of :func:`run_medians`: runs with DataFlex on opposite parities cancel a parity effect."""
    medians = run_medians(runs)
    if not medians:
        raise ValueError("balanced_ratio needs at least one run with a pair of steps")
    return statistics.geometric_mean(medians)
