"""Interleaved median timing.

The case and its baseline run alternately (baseline, case, baseline, case, ...)
after a warm-up, so a burst of load from another process hits both sides of a
ratio instead of one. The median of the repetitions is reported because a
single pre-empted repetition must not move the figure; a ratio of two calls is
best the median of their per-round ratios (:meth:`Timings.paired_ratio`),
which a burst lasting several rounds moves little. The process's CPU
time (all its threads, user and system, so page faults count) is recorded
beside the wall time: when other processes share the cores it moves far less.
A function may need fresh inputs for every call (a host builds a new batch
each step): :class:`Fresh` builds them before the clock starts. A disturbance
that lasts longer than a measurement's rounds (a spell of tens of seconds
where one call runs faster than its neighbour) moves every round alike, so
no number of rounds in a row removes it; :func:`split_reps` and
:func:`passes_paired_ratio` measure in passes apart in time instead.
"""

from __future__ import annotations

import functools
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

Clock = Callable[[], float]


def synchronizer(device: torch.device | str) -> Callable[[], None]:
    """What to call before reading the clock so queued device work is counted."""
    device = torch.device(device)
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


@dataclass(frozen=True)
class Fresh:
    """``run(setup())`` with only ``run`` timed: each repetition gets inputs of its own, built untimed."""

    run: Callable[[Any], object]
    setup: Callable[[], Any]


@dataclass
class Timings:
    """Per-repetition seconds of each timed function, warm-up excluded."""

    samples: dict[str, list[float]] = field(default_factory=dict)
    #: Process CPU seconds of the same repetitions.
    cpu_samples: dict[str, list[float]] = field(default_factory=dict)

    def median(self, name: str, cpu: bool = False) -> float:
        return statistics.median((self.cpu_samples if cpu else self.samples)[name])

    def ratio(self, numerator: str, denominator: str, cpu: bool = False) -> float:
        """Ratio of medians (of CPU times with ``cpu``); infinite when the denominator's median is zero."""
        den = self.median(denominator, cpu)
        return self.median(numerator, cpu) / den if den > 0 else float("inf")

    def trimmed_mean(self, name: str, trim: float = 0.1) -> float:
        """The mean of ``name``'s samples without the ``trim`` share at each end (``int(n * trim)`` samples each).

        Where one call's time is bimodal (a fast and a slow cluster), a median lands in one cluster or the other
        depending on a sample or two, while the mean weighs each cluster by how often a call lands there (what a
        run pays over its steps); the trim keeps one pre-empted call out.
        """
        if not 0 <= trim < 0.5:
            raise ValueError(f"trim is the share left out at each end, in [0, 0.5), got {trim!r}")
        values = sorted(self.samples[name])
        cut = int(len(values) * trim)
        return statistics.fmean(values[cut : len(values) - cut])

    def trimmed_ratio(self, numerator: str, denominator: str, trim: float = 0.1) -> float:
        """Ratio of :meth:`trimmed_mean` figures; infinite when the denominator's is zero."""
        den = self.trimmed_mean(denominator, trim)
        return self.trimmed_mean(numerator, trim) / den if den > 0 else float("inf")

    def paired_ratio(self, numerator: str, denominator: str) -> float:
        """Median of the per-round ratios of wall times: each call against its neighbour of the same round.

        A burst of load that lasts a few rounds slows both calls of those rounds, so it moves their ratio far
        less than it moves one side's median (a ratio of medians takes each median from different rounds).
        Infinite when a round's denominator is zero.
        """
        num, den = self.samples[numerator], self.samples[denominator]
        return statistics.median(a / b if b > 0 else float("inf") for a, b in zip(num, den, strict=True))


def measure_interleaved(
    functions: Mapping[str, Callable[[], object] | Fresh],
    *,
    reps: int,
    warmup: int = 1,
    sync: Callable[[], None] = lambda: None,
    clock: Clock = time.perf_counter,
    cpu_clock: Clock = time.process_time,
    rotate: bool = False,
) -> Timings:
    """Time each function ``reps`` times, cycling through them in the given order.

    :param functions: name -> zero-argument callable, or a :class:`Fresh` whose setup
        runs before the clock starts; the order of the mapping is the order inside
        each round (put the baseline first). A call's result is released after
        the clock stops, as a host keeps the step's outputs beyond the step.
    :param reps: timed rounds; each function runs once per round.
    :param warmup: untimed rounds first (allocator, caches, lazy imports).
    :param sync: called before each clock read (device synchronisation).
    :param rotate: round ``i`` starts at the ``i``-th function (mod their number), so no function always runs
        in the same place of a round (right after a given neighbour's allocations and frees).
    """
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    timings = Timings({name: [] for name in functions}, {name: [] for name in functions})
    items = list(functions.items())
    for round_index in range(warmup + reps):
        shift = round_index % len(items) if rotate else 0
        for name, fn in items[shift:] + items[:shift]:
            call = functools.partial(fn.run, fn.setup()) if isinstance(fn, Fresh) else fn
            sync()
            start, cpu_start = clock(), cpu_clock()
            result = call()
            sync()
            elapsed, cpu = clock() - start, cpu_clock() - cpu_start
            del result, call
            if round_index >= warmup:
                timings.samples[name].append(elapsed)
                timings.cpu_samples[name].append(cpu)
    return timings


def split_reps(reps: int, passes: int = 2) -> list[int]:
    """``reps`` rounds as up to ``passes`` passes of near-equal length (no empty pass): 15 -> [8, 7], 1 -> [1]."""
    if reps < 1 or passes < 1:
        raise ValueError(f"reps and passes must be >= 1, got reps={reps}, passes={passes}")
    return [n for n in (reps // passes + (i < reps % passes) for i in range(passes)) if n > 0]


def merged(passes: Sequence[Timings]) -> Timings:
    """One :class:`Timings` with every pass's samples, in pass order (for medians over all rounds)."""
    out = Timings()
    for timings in passes:
        for name, values in timings.samples.items():
            out.samples.setdefault(name, []).extend(values)
        for name, values in timings.cpu_samples.items():
            out.cpu_samples.setdefault(name, []).extend(values)
    return out


def passes_paired_ratio(passes: Sequence[Timings], numerator: str, denominator: str) -> float:
    """The median (in log terms) of each pass's :meth:`Timings.paired_ratio`: the middle pass of three, the
    geometric mean of two.

    Passes measured minutes apart fall in different spells of the machine: a spell that makes one call of the
    pair faster for a whole pass reads as a factor in that pass only. Of three passes the median leaves it out
    (two of two spells at 1.23-1.24 read 1.11-1.12 as a geometric mean of two passes, 2026-12-06), where one
    median over rounds in a row takes it whole; a cost the call really adds is in every pass and stays.
    """
    if not passes:
        raise ValueError("passes_paired_ratio needs at least one pass")
    logs = [math.log(t.paired_ratio(numerator, denominator)) for t in passes]
    return math.exp(statistics.median(logs))
