"""Time to a target on the three cost axes: rollouts generated, optimizer steps, and modeled wall time.

A method that changes what a step costs can win on one axis and lose on another: a filter or a pilot trains on
more informative groups per optimizer step but generates more rollouts, in more sequential calls, for each. So
the time to the held-out target is read on each axis, by :func:`~.comparison.compare_runs` once per axis
(the same reading, censoring and test as ``--target``), and a verdict always names its axis. This is the one
path both ``dataflex compare --cost-axes`` and the evidence campaign's table take (:func:`reach_on_axes`).

Each axis's ratios are Holm-adjusted over the arms on that axis only; across axes they are separate readings of
one question, and a caller that declares one of them primary (the campaign: rollouts) treats the rest as
exploratory.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from .comparison import compare_runs
from .cost_model import CostModel
from .results import MetricResult
from .runs import Run

#: The axes, in the order tables show them; ``modeled`` only where a cost model is given.
COST_AXES = ("rollouts", "optimizer_steps", "modeled")
#: Column headings.
AXIS_TITLES = {
    "rollouts": "rollouts to target",
    "optimizer_steps": "optimizer steps to target",
    "modeled": "modeled seconds to target",
}


def axes_for(cost_model: CostModel | None) -> tuple[str, ...]:
    """The axes a comparison can read: all three with a cost model, else rollouts and optimizer steps."""
    return COST_AXES if cost_model is not None else COST_AXES[:2]


def reach_on_axes(
    runs: Iterable[Run | Mapping[str, Any]] | Mapping[str, Any],
    *,
    metric: str,
    target: float,
    cost_model: CostModel | None = None,
    **options: Any,
) -> dict[str, MetricResult]:
    """Per axis, ``metric``'s comparison with its time to ``target`` and each arm's ratio to the baseline.

    ``options`` are :func:`~.comparison.compare_runs`'s (``baseline``, ``arms``, ``seeds``, ``test``, ``alpha``,
    ...), the same on every axis.
    """
    if not isinstance(runs, Mapping):
        runs = list(runs)
    return {
        x: compare_runs(runs, metrics=[metric], x=x, target=target, cost_model=cost_model, **options).metrics[0]
        for x in axes_for(cost_model)
    }


def ratio_summary(results: Mapping[str, MetricResult], arm: str) -> dict[str, dict[str, Any]]:
    """``arm``'s ratio to the baseline on each axis as plain numbers (what the campaign's rows keep)."""
    out = {}
    for x, metric in results.items():
        r = metric.ratios[arm]
        reach = metric.reach
        base = metric.arms[0].arm
        out[x] = {
            "value": r.ratio,
            "ci": list(r.ci),
            "p": r.p,
            "p_holm": r.p_holm,
            "bound": r.bound,
            "verdict": r.verdict,
            "mean": {base: reach[base].mean, arm: reach[arm].mean},
        }
    return out


def ratio_cell(ratio: Mapping[str, Any]) -> str:
    """``>= 1.52x [1.10, 2.08]``: a ratio with its censoring bound and interval."""
    if math.isnan(ratio["value"]):
        return "reached at the start"
    bound = f"{ratio['bound']} " if ratio["bound"] else ""
    low, high = (("+inf" if v > 0 else "-inf") if math.isinf(v) else f"{v:.2f}" for v in ratio["ci"])
    return f"{bound}{ratio['value']:.2f}x [{low}, {high}]"


def axes_markdown(results: Mapping[str, MetricResult], cost_model: CostModel | None) -> str:
    """The table ``dataflex compare --cost-axes`` prints: per arm, its ratio to the baseline on each axis."""
    first = next(iter(results.values()))
    axes = list(results)
    lines = [
        f"## Time to {first.target:g} of `{first.metric}` on each cost axis",
        "",
        f"Baseline / arm (above 1: the arm needed less) [interval], p Holm-adjusted over the arms on that axis; the "
        f"verdict names its axis. Modeled seconds: {cost_model.describe() if cost_model else 'no cost model given'}.",
        "",
        "| arm | " + " | ".join(f"{AXIS_TITLES[x]} | p (Holm)" for x in axes) + " | verdict |",
        "| --- | " + " | ".join("--- | ---:" for _ in axes) + " | --- |",
    ]
    for arm in (a.arm for a in first.arms[1:]):
        summary = ratio_summary(results, arm)
        cells = " | ".join(f"{ratio_cell(summary[x])} | {summary[x]['p_holm']:.3g}" for x in axes)
        verdicts = [f"{summary[x]['verdict']} {AXIS_TITLES[x].removesuffix(' to target')}" for x in axes
                    if summary[x]["verdict"] != "not separated"]  # fmt: skip
        lines.append(f"| `{arm}` | {cells} | {'; '.join(verdicts) or 'not separated'} |")
    return "\n".join(lines) + "\n"
