"""The x axis a comparison is made on: steps, or the compute a run spent (rollouts, tokens, seconds, modeled seconds).

Methods that change what a step costs (filtering, refilling, curricula) are compared at equal compute, not at
equal steps: a run's curve is put on the cumulative counter the hosts log at every step
(:data:`AXES`), and every run is cut at the budget all of them reached (:func:`common_budget`), so each arm's
area and final window cover the same compute. ``optimizer_steps`` is the step count put on the same footing (each
run at its own steps, so runs that stopped at a rollout budget after different step counts compare), and
``modeled`` a run's wall time under a stated cost model (:mod:`.cost_model`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..compute import total
from . import cost_model as cost_model_
from .runs import CompareError, Run

#: ``--x`` choices and the metric each reads (``step`` and ``optimizer_steps`` read none; ``seconds`` sums the step
#: time; ``modeled`` reads three counters through a cost model).
AXES = {
    "step": None,
    "rollouts": total("rollouts_generated"),
    "tokens": total("tokens_generated"),
    "seconds": None,
    "optimizer_steps": None,
    "modeled": None,
}
#: Step-time metrics ``--x seconds`` sums, in the order tried: verl's, TRL's.
STEP_TIME_METRICS = ("timing_s/step", "step_time")
#: How the axis is named in tables and plots.
AXIS_LABELS = {
    "step": "step",
    "rollouts": "rollouts generated",
    "tokens": "tokens generated",
    "seconds": "seconds",
    "optimizer_steps": "optimizer steps",
    "modeled": "modeled seconds",
}


#: On a compute axis, ``final`` is the curve's average height over this last share of the common budget.
FINAL_SHARE = 0.25


def check_axis(x: str) -> None:
    if x not in AXES:
        raise CompareError(f"--x {x!r} is not one of {', '.join(AXES)}")


def axis_values(
    run: Run, x: str, steps: Sequence[int], cost_model: cost_model_.CostModel | None = None
) -> tuple[float, ...]:
    """The run's position on axis ``x`` at each of ``steps``: the counter's total logged at or before the step
    (0 before the first training step, e.g. at an evaluation of step 0); on ``modeled``, ``cost_model``'s seconds
    of the three counters it reads."""
    check_axis(x)
    if x in ("step", "optimizer_steps"):
        return tuple(float(s) for s in steps)
    if x == "modeled":
        if cost_model is None:
            raise CompareError(
                "--x modeled needs a cost model: --seconds-per-rollout, --seconds-per-call and "
                "--seconds-per-trained-rollout (docs/evidence.md#cost-model)"
            )
        cost_model_.check_counters(run)
        counters = [_counter_values(run, name, steps) for name in cost_model_.COUNTERS]
        return cost_model_.modeled_seconds(cost_model, counters)
    return _counter_values(run, x, steps)


def _counter_values(run: Run, x: str, steps: Sequence[int]) -> tuple[float, ...]:
    """A cumulative series (axis ``x``'s counter, the summed step time, or a counter's metric name) at ``steps``."""
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
        name = AXES.get(x) or x
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
