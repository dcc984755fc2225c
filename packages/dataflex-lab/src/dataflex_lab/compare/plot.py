"""Curves with bands: each arm's mean over seeds, step by step, inside its bootstrap interval.

matplotlib is a requirement of ``dataflex-lab``; only this module imports it, and only when a
plot is asked for (an environment that removed it gets a clear error).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from . import stats
from .axis import AXIS_LABELS, FINAL_SHARE, interpolate
from .results import MetricResult
from .runs import CompareError

INSTALL_PLOT = "pip install matplotlib"
#: Resamples per step for the bands (fewer than the table's: a band is read by eye).
BAND_RESAMPLES = 2_000
#: Points of the common grid a compute axis is drawn on.
GRID_POINTS = 60


def require_matplotlib() -> None:
    """Fail before any work is done when a plot is asked for and matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise CompareError(f"--plot needs matplotlib, which is not installed: {INSTALL_PLOT}") from None


def plot_report(
    metrics: Sequence[MetricResult], path: str | Path, *, baseline: str, confidence: float, rng_seed: int
) -> None:
    """Write one panel per metric to ``path`` (the format follows its suffix: .png, .pdf, .svg): each arm's mean
    curve (``baseline``'s marked) in its ``confidence`` bootstrap band, resampled from ``rng_seed``."""
    require_matplotlib()
    from matplotlib.figure import Figure

    panels = len(metrics)
    figure = Figure(figsize=(8, 3.4 * panels), layout="constrained")
    axes = figure.subplots(panels, 1, squeeze=False)[:, 0]
    for ax, metric in zip(axes, metrics):
        on_steps = metric.x == "step"
        grid = list(metric.steps) if on_steps else _grid(metric.budget, metric.axes)
        for arm, seeds in metric.curves.items():
            if on_steps:
                values = stats.as_values(list(seeds.values()))  # (seeds, steps)
            else:  # each run interpolated onto one grid of the axis, up to the common budget
                values = stats.as_values(
                    [[interpolate(metric.axes[arm][seed], curve, at) for at in grid] for seed, curve in seeds.items()]
                )
            low, high = stats.bootstrap_mean_interval(
                values, confidence=confidence, n_boot=BAND_RESAMPLES, rng_seed=rng_seed
            )
            label = f"{arm} (baseline)" if arm == baseline else arm
            (line,) = ax.plot(grid, values.mean(0).tolist(), label=f"{label}, {len(seeds)} seeds")
            ax.fill_between(grid, low.tolist(), high.tolist(), color=line.get_color(), alpha=0.2, linewidth=0)
        if on_steps:
            window = metric.window_steps
            ax.axvspan(window[0], window[-1], color="grey", alpha=0.08, label=f"final window ({metric.window} points)")
        else:
            start = grid[0] + (1 - FINAL_SHARE) * (grid[-1] - grid[0])
            ax.axvspan(start, grid[-1], color="grey", alpha=0.08, label=f"final ({FINAL_SHARE:.0%} of the budget)")
        if metric.target is not None:
            ax.axhline(metric.target, color="black", linestyle=":", linewidth=1, label=f"target {metric.target:g}")
        ax.set_title(metric.metric)
        ax.set_xlabel(AXIS_LABELS[metric.x] + ("" if on_steps else " (equal compute: up to the common budget)"))
        ax.legend(fontsize="small")
    figure.suptitle(f"mean over seeds, {confidence * 100:g}% bootstrap band")
    figure.savefig(path)


def _grid(budget: float, axes: dict[str, dict[int, tuple[float, ...]]], points: int = GRID_POINTS) -> list[float]:
    start = min(axis[0] for seeds in axes.values() for axis in seeds.values())
    return [start + (budget - start) * i / (points - 1) for i in range(points)]
