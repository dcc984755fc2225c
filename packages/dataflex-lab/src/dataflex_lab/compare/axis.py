"""The x axis a comparison is made on: steps, or the compute a run spent (rollouts, tokens, seconds).

Methods that change what a step costs (filtering, refilling, curricula) are compared at equal compute, not at
equal steps: a run's curve is put on the cumulative counter the hosts log at every step
(:data:`AXES`), and every run is cut at the budget all of them reached (:func:`common_budget`), so each arm's
area and final window cover the same compute.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..compute import total
from .runs import CompareError, Run

#: ``--x`` choices and the metric each reads (``step`` reads none; ``seconds`` sums the step time).
AXES = {
    "step": None,
    "rollouts": total("rollouts_generated"),
    "tokens": total("tokens_generated"),
    "seconds": None,
}
#: Step-time metrics ``--x seconds`` sums, in the order tried: verl's, TRL's.
STEP_TIME_METRICS = ("timing_s/step", "step_time")
#: How the axis is named in tables and plots.
AXIS_LABELS = {"step": "step", "rollouts": "rollouts generated", "tokens": "tokens generated", "seconds": "seconds"}


#: On a compute axis, ``final`` is the curve's average height over this last share of the common budget.
FINAL_SHARE = 0.25


def check_axis(x: str) -> None:
    if x not in AXES:
        raise CompareError(f"--x {x!r} is not one of {', '.join(AXES)}")


def axis_values(run: Run, x: str, steps: Sequence[int]) -> tuple[float, ...]:
    """The run's position on axis ``x`` at each of ``steps``: the counter's total logged at or before the step
    (0 before the first training step, e.g. at an evaluation of step 0)."""
    check_axis(x)
    if x == "step":
        return tuple(float(s) for s in steps)
    if x == "seconds":
        name = next((m for m in STEP_TIME_METRICS if m in run.metric_names()), None)
        if name is None:
            raise CompareError(
                f"{run.describe()} logs no step time ({' or '.join(STEP_TIME_METRICS)}): --x seconds sums it; "
                "compare on --x step or rollouts instead"
            )
        series, running = [], 0.0
        for step, value in run.curve(name):
            running += value
            series.append((step, running))
    else:
        name = AXES[x]
        series = run.curve(name)
        if not series:
            raise CompareError(
                f"{run.describe()} logs no {name!r}: --x {x} reads the per-step compute counters the hosts (and the "
                "demos, for arms without DataFlex) log; log them for every arm or compare on --x step"
            )
    bad = [step for step, value in series if math.isnan(value)]
    if bad:
        raise CompareError(f"{run.describe()}: {name!r} is not a finite number at step(s) {bad[:8]}")
    for (s0, v0), (s1, v1) in zip(series, series[1:]):
        if v1 < v0:
            raise CompareError(
                f"{run.describe()}: {name!r} falls from {v0:g} at step {s0} to {v1:g} at step {s1}; a cumulative "
                "counter never falls (a resumed run that restarted its totals?)"
            )
    out, index, current = [], 0, 0.0
    for step in steps:
        while index < len(series) and series[index][0] <= step:
            current = series[index][1]
            index += 1
        out.append(current)
    return tuple(out)


def common_budget(axes: Sequence[Sequence[float]]) -> float:
    """The compute every run reached: the smallest of the runs' last axis values."""
    return min(values[-1] for values in axes)


def cut(axis: Sequence[float], values: Sequence[float], budget: float) -> tuple[list[float], list[float]]:
    """The curve up to ``budget`` on the axis, its last point interpolated at the budget where it falls between
    two logged points."""
    xs, ys = [], []
    for i, (a, v) in enumerate(zip(axis, values)):
        if a <= budget:
            xs.append(a)
            ys.append(v)
            continue
        if xs and xs[-1] < budget:
            share = (budget - axis[i - 1]) / (a - axis[i - 1])
            xs.append(budget)
            ys.append(values[i - 1] + share * (v - values[i - 1]))
        break
    return xs, ys


def interpolate(axis: Sequence[float], values: Sequence[float], at: float) -> float:
    """The curve's value at ``at`` (linear between logged points; the end value beyond them)."""
    if at <= axis[0]:
        return values[0]
    for i in range(1, len(axis)):
        if at <= axis[i]:
            if axis[i] == axis[i - 1]:
                return values[i]
            share = (at - axis[i - 1]) / (axis[i] - axis[i - 1])
            return values[i - 1] + share * (values[i] - values[i - 1])
    return values[-1]


def mean_height(axis: Sequence[float], values: Sequence[float], start: float, end: float) -> float:
    """The curve's average height between ``start`` and ``end`` on the axis (trapezoids, linear between points)."""
    if end <= start:
        return interpolate(axis, values, end)
    xs = [start, *(a for a in axis if start < a < end), end]
    ys = [interpolate(axis, values, a) for a in xs]
    area = sum((xs[i + 1] - xs[i]) * (ys[i] + ys[i + 1]) / 2 for i in range(len(xs) - 1))
    return area / (end - start)
