"""Time to target: how much compute (steps, rollouts, tokens, seconds) each run needed to reach a level.

The claim a data-centric method makes is "the same quality for less compute", so the reading is the axis value at
which a run's curve first reaches ``--target`` (linear between the two logged points around the crossing), within
the budget every run reached (equal compute), and per arm its ratio to the baseline's.

One statistic carries the verdict: the per-seed log ratio ``log(T_baseline / T_arm)`` (paired by seed; unpaired,
the difference of the arms' mean logs). A log ratio is scale-free and symmetric (twice as fast and twice as slow
are +-log 2), and the log tames the long right tail times to a level have. The table shows ``exp`` of its mean
(the geometric mean of the per-seed ratios; above 1: the arm needed less), and its p-value and interval come from
one test of that mean (:func:`~.stats.shift_test`), so the interval excludes 1 exactly when p < 1 - confidence.

A run that never reaches the target within the common budget is *censored* at the budget: it needed more, so its
time is a lower bound. A censored seed's log ratio is then pulled towards 0, never across it (both runs censored:
exactly 0, no evidence either way), so censoring can hide a difference but not invent one; the table says which
side was censored: only baseline runs -> the arm's saving is at least the ratio (``>=``); only the arm's -> at most
(``<=``); both -> neither (``?``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from . import axis as axes_
from . import stats

#: Verdicts of a ratio (Holm-adjusted p below alpha, by the side of 1 it lies on).
FEWER, MORE, NOT_SEPARATED = "needs less", "needs more", "not separated"


@dataclass(frozen=True)
class Reach:
    """One arm's time to target per seed (the budget where not reached), and which seeds reached it."""

    per_seed: dict[int, float]
    reached: dict[int, bool]
    mean: float
    ci: tuple[float, float]

    @property
    def censored(self) -> list[int]:
        return [seed for seed, ok in self.reached.items() if not ok]


@dataclass(frozen=True)
class Ratio:
    """``exp`` of the mean per-seed ``log(T_baseline / T_arm)``, its interval and p from one test, bound, verdict."""

    ratio: float
    ci: tuple[float, float]
    p: float
    p_holm: float
    bound: str
    verdict: str
    method: str = ""
    min_p: float = 0.0


def first_reach(
    axis: Sequence[float], values: Sequence[float], target: float, budget: float | None = None
) -> tuple[float, bool]:
    """The axis value where the curve first reaches ``target`` within ``budget`` (default its whole length), and
    whether it did (else the budget, or its last axis value)."""
    if budget is not None:
        axis, values = axes_.cut(axis, values, budget)
    for i, value in enumerate(values):
        if value >= target:
            if i == 0 or values[i - 1] == value:
                return axis[i], True
            share = (target - values[i - 1]) / (value - values[i - 1])
            return axis[i - 1] + share * (axis[i] - axis[i - 1]), True
    return (axis[-1] if budget is None else budget), False


def reach(curves: Mapping[int, tuple[Sequence[float], Sequence[float]]], target: float, confidence: float,
          n_boot: int, rng_seed: int, budget: float | None = None) -> Reach:  # fmt: skip
    """An arm's :class:`Reach` from ``{seed: (axis, values)}``; the mean's interval is a bootstrap over seeds."""
    found = {seed: first_reach(axis, values, target, budget) for seed, (axis, values) in sorted(curves.items())}
    per_seed = {seed: at for seed, (at, _) in found.items()}
    values = list(per_seed.values())
    ci = stats.bootstrap_mean_interval(values, confidence=confidence, n_boot=n_boot, rng_seed=rng_seed)
    return Reach(per_seed, {s: ok for s, (_, ok) in found.items()}, statistics.fmean(values), ci)


def ratio(arm: Reach, base: Reach, paired: bool, confidence: float, rng_seed: int, test: str = "permutation") -> Ratio:
    """The ratio before Holm's adjustment (``p_holm`` is ``p``, the verdict pending)."""
    seeds = sorted(base.per_seed)
    a = stats.as_values([arm.per_seed[s] for s in seeds] if paired else list(arm.per_seed.values()))
    b = stats.as_values([base.per_seed[s] for s in seeds] if paired else list(base.per_seed.values()))
    if float(a.min()) <= 0.0 or float(b.min()) <= 0.0:
        # reached at the very start (axis 0): no compute was needed, a ratio means nothing
        estimate, ci, p, method, min_p = math.nan, (math.nan, math.nan), 1.0, "", 1.0
    else:
        result = stats.shift_test(b.log(), a.log(), paired=paired, test=test, confidence=confidence, rng_seed=rng_seed)
        estimate, ci = math.exp(result.estimate), (_exp(result.ci[0]), _exp(result.ci[1]))
        p, method, min_p = result.p, result.method, result.min_p
    censored_arm, censored_base = bool(arm.censored), bool(base.censored)
    bound = {(False, False): "", (False, True): ">=", (True, False): "<=", (True, True): "?"}[
        (censored_arm, censored_base)
    ]
    return Ratio(estimate, ci, p, p, bound, NOT_SEPARATED, method, min_p)


def _exp(value: float) -> float:
    return 0.0 if value == -math.inf else math.inf if value == math.inf else math.exp(value)


def adjust(ratios: Mapping[str, Ratio], alpha: float) -> dict[str, Ratio]:
    """Holm's adjustment over the arms, and each ratio's verdict."""
    arms = list(ratios)
    adjusted = stats.holm_adjusted([ratios[arm].p for arm in arms])
    return {arm: with_verdict(ratios[arm], p_holm, alpha) for arm, p_holm in zip(arms, adjusted)}


def with_verdict(r: Ratio, p_holm: float, alpha: float) -> Ratio:
    """``r`` with an adjusted p and the verdict it gives."""
    separated = p_holm < alpha and not math.isnan(r.ratio) and r.ratio != 1.0
    verdict = NOT_SEPARATED if not separated else FEWER if r.ratio > 1.0 else MORE
    return replace(r, p_holm=p_holm, verdict=verdict)
