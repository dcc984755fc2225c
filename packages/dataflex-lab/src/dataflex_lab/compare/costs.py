"""Where each arm's rollouts went: generated per trained group, the wasted share, rounds, step time against a baseline.

A filter trains on informative groups by generating more of them, a curriculum by choosing prompts, a selector by
dropping rows; the comparison at equal rollouts says whether that paid, this table says what it cost. It reads the
cumulative ``dataflex/compute/*_total`` counters every arm logs (the demos derive them for the plain framework's
arm) at each run's last step, and the framework's step time, and gives per arm the mean over seeds with a
bootstrap interval:

- rollouts generated per trained group: ``rollouts_generated / (rollouts_trained / group_size)``; a plain GRPO run
  generates ``group_size``, a filter more (its evicted groups count), a selector that trains half the rows twice;
- the wasted share: ``rollouts_wasted / rollouts_trained``, the trained rows whose advantage is zero (a group
  whose rewards all agree): trained, but they move nothing;
- generation rounds per step (1 without refills);
- the step time: each run's median seconds per step with its first (warm-up) step left out
  (:func:`median_step_time`, the one step-time figure both demos print), and its ratio to the baseline's, paired
  by seed.

An interval needs two seeds: from one seed the table gives the value alone.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..compute import total
from . import stats
from .axis import STEP_TIME_METRICS
from .runs import CompareError, Run, by_arm

#: What the table reads from each run, by column.
GENERATED, TRAINED, WASTED, ROUNDS = (
    total(n) for n in ("rollouts_generated", "rollouts_trained", "rollouts_wasted", "generation_rounds")
)
#: Column name -> how it is written in the table.
COLUMNS = {
    "generated_per_group": "rollouts generated per trained group",
    "wasted_share": "wasted (zero-advantage) share of trained",
    "rounds_per_step": "generation rounds per step",
    "step_time_s": "median step time (warm-up excluded)",
    "step_time_ratio": "step time / baseline",
}


@dataclass(frozen=True)
class Mean:
    """One column of one arm: the per-seed values, their mean and its bootstrap interval (``None`` from one seed)."""

    per_seed: dict[int, float]
    mean: float
    ci: tuple[float, float] | None


@dataclass(frozen=True)
class ArmCosts:
    """One arm's columns (``step_time_ratio`` is ``None`` where a run or its baseline logged no step time)."""

    arm: str
    seeds: list[int]
    columns: dict[str, Mean | None]


@dataclass(frozen=True)
class CostTable:
    """Every arm's :class:`ArmCosts`, the baseline's first."""

    baseline: str
    group_size: int
    confidence: float
    arms: list[ArmCosts]

    def markdown(self) -> str:
        head = ["arm", "seeds", *COLUMNS.values()]
        lines = [
            f"Compute per arm: mean over seeds [{self.confidence * 100:g}% bootstrap interval, from 2 seeds on], at "
            f"each run's last step; groups of {self.group_size} rollouts; step time: each run's median second per "
            f"step without its first (warm-up) step, paired by seed with `{self.baseline}`.",
            "",
            "| " + " | ".join(head) + " |",
            "| --- | ---: | " + " | ".join("---" for _ in COLUMNS) + " |",
        ]
        for arm in self.arms:
            name = f"`{arm.arm}` (baseline)" if arm.arm == self.baseline else f"`{arm.arm}`"
            cells = [_cell(arm.columns[key], fmt) for key, fmt in _FORMATS.items()]
            lines.append(f"| {name} | {len(arm.seeds)} | " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"

    def as_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "group_size": self.group_size,
            "confidence": self.confidence,
            "arms": {
                arm.arm: {
                    "seeds": arm.seeds,
                    **{
                        key: None if value is None else {"mean": value.mean,
                                                         "ci": None if value.ci is None else list(value.ci),
                                                         "per_seed": {str(s): v for s, v in value.per_seed.items()}}
                        for key, value in arm.columns.items()
                    },
                }
                for arm in self.arms
            },
        }  # fmt: skip


def compute_costs(
    runs: Iterable[Run],
    *,
    baseline: str,
    group_size: int,
    confidence: float = stats.CONFIDENCE,
    n_boot: int = stats.N_BOOTSTRAP,
    rng_seed: int = stats.RNG_SEED,
) -> CostTable:
    """The :class:`CostTable` of ``runs`` (every arm's, ``baseline`` first), from their compute counters."""
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise CompareError(f"group_size must be a positive integer (completions per prompt), got {group_size!r}")
    grouped = by_arm(runs)
    if baseline not in grouped:
        raise CompareError(f"baseline arm {baseline!r} has no runs; the arms are {', '.join(grouped)}")
    base_times = {seed: median_step_time(run) for seed, run in grouped[baseline].items()}
    table = []
    for arm in [baseline, *(a for a in grouped if a != baseline)]:
        seeds = grouped[arm]
        per_seed: dict[str, dict[int, float]] = {key: {} for key in COLUMNS}
        for seed, run in sorted(seeds.items()):
            generated, trained, wasted, rounds = (_last(run, name) for name in (GENERATED, TRAINED, WASTED, ROUNDS))
            if trained <= 0:
                raise CompareError(f"{run.describe()} trained no rollout ({TRAINED} is {trained:g}): nothing to cost")
            steps = len(run.curve(GENERATED))
            per_seed["generated_per_group"][seed] = generated / (trained / group_size)
            per_seed["wasted_share"][seed] = wasted / trained
            per_seed["rounds_per_step"][seed] = rounds / steps
            mine, theirs = median_step_time(run), base_times.get(seed)
            if mine is not None:
                per_seed["step_time_s"][seed] = mine
            if mine is not None and theirs:
                per_seed["step_time_ratio"][seed] = mine / theirs
        columns: dict[str, Mean | None] = {}
        for key, values in per_seed.items():
            complete = not key.startswith("step_time") or len(values) == len(seeds)
            columns[key] = _mean(values, confidence, n_boot, rng_seed) if values and complete else None
        table.append(ArmCosts(arm, sorted(seeds), columns))
    return CostTable(baseline, group_size, confidence, table)


def _last(run: Run, metric: str) -> float:
    series = run.curve(metric)
    if not series:
        raise CompareError(
            f"{run.describe()} logs no {metric!r}: the compute table reads the cumulative counters the hosts (and the "
            "demos, for arms without DataFlex) log at every step"
        )
    value = series[-1][1]
    if math.isnan(value):
        raise CompareError(f"{run.describe()}: {metric!r} is not a finite number at step {series[-1][0]}")
    return value


def median_step_time(run: Run) -> float | None:
    """The run's median seconds per step, its first step (warm-up: compilation, first allocations) left out
    unless it is the only one; ``None`` when it logs no step time (``timing_s/step`` or ``step_time``)."""
    name = next((m for m in STEP_TIME_METRICS if m in run.metric_names()), None)
    values = [value for _, value in run.curve(name) if not math.isnan(value)] if name else []
    if len(values) > 1:
        values = values[1:]
    return statistics.median(values) if values else None


def _mean(per_seed: Mapping[int, float], confidence: float, n_boot: int, rng_seed: int) -> Mean:
    values = list(per_seed.values())
    if len(values) == 1:  # no interval from one seed
        return Mean(dict(per_seed), values[0], None)
    ci = stats.bootstrap_mean_interval(values, confidence=confidence, n_boot=n_boot, rng_seed=rng_seed)
    return Mean(dict(per_seed), statistics.fmean(values), ci)


_FORMATS: dict[str, Callable[[float], str]] = {
    "generated_per_group": lambda v: f"{v:.1f}",
    "wasted_share": lambda v: f"{v * 100:.0f}%",
    "rounds_per_step": lambda v: f"{v:.2f}",
    "step_time_s": lambda v: f"{v:.2f} s",
    "step_time_ratio": lambda v: f"{v:.2f}x",
}


def _cell(value: Mean | None, fmt: Callable[[float], str]) -> str:
    if value is None:
        return "—"
    if value.ci is None:
        return fmt(value.mean)
    return f"{fmt(value.mean)} [{fmt(value.ci[0])}, {fmt(value.ci[1])}]"
