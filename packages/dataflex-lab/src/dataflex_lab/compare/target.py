"""Time to target: how much compute (steps, rollouts, tokens, seconds) each run needed to reach a level.

The claim a data-centric method makes is "the same quality for less compute", so the reading is the axis value at
which a run's curve first reaches ``--target`` (linear between the two logged points around the crossing), and
per arm the ratio ``mean(baseline) / mean(arm)`` (above 1: the arm needed less), with a bootstrap interval over
seeds (resampled together when paired) and a permutation test on the per-seed log ratios.

A run that never reaches the target is *censored*: it needed more than its last axis value, which is what is
used, so the ratio is a bound and the table says which: only baseline runs censored -> the arm's saving is at
least the ratio (``>=``); only the arm's -> at most (``<=``); both -> neither (``?``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from . import stats

#: Verdicts of a ratio (Holm-adjusted p below alpha, by the side of 1 it lies on).
FEWER, MORE, NOT_SEPARATED = "needs less", "needs more", "not separated"


@dataclass(frozen=True)
class Reach:
    """One arm's time to target per seed (its last axis value where not reached), and which seeds reached it."""

    per_seed: dict[int, float]
    reached: dict[int, bool]
    mean: float
    ci: tuple[float, float]

    @property
    def censored(self) -> list[int]:
        return [seed for seed, ok in self.reached.items() if not ok]


@dataclass(frozen=True)
class Ratio:
    """``mean(baseline) / mean(arm)`` of the time to target, its interval, p-values, bound and verdict."""

    ratio: float
    ci: tuple[float, float]
    p: float
    p_holm: float
    bound: str
    verdict: str


def first_reach(axis: Sequence[float], values: Sequence[float], target: float) -> tuple[float, bool]:
    """The axis value where the curve first reaches ``target``, and whether it did (else its last axis value)."""
    for i, value in enumerate(values):
        if value >= target:
            if i == 0 or values[i - 1] == value:
                return axis[i], True
            share = (target - values[i - 1]) / (value - values[i - 1])
            return axis[i - 1] + share * (axis[i] - axis[i - 1]), True
    return axis[-1], False


def reach(curves: Mapping[int, tuple[Sequence[float], Sequence[float]]], target: float, confidence: float,
          n_boot: int, rng_seed: int) -> Reach:  # fmt: skip
    """An arm's :class:`Reach` from ``{seed: (axis, values)}``."""
    found = {seed: first_reach(axis, values, target) for seed, (axis, values) in sorted(curves.items())}
    per_seed = {seed: at for seed, (at, _) in found.items()}
    ci = stats.bootstrap_mean_interval(list(per_seed.values()), confidence=confidence, n_boot=n_boot, rng_seed=rng_seed)
    return Reach(per_seed, {s: ok for s, (_, ok) in found.items()}, statistics.fmean(per_seed.values()), ci)


def ratio(arm: Reach, base: Reach, paired: bool, confidence: float, n_boot: int, rng_seed: int) -> Ratio:
    """The ratio before Holm's adjustment (``p_holm`` is ``p``, the verdict pending)."""
    seeds = sorted(base.per_seed)
    a = stats.as_values([arm.per_seed[s] for s in seeds] if paired else list(arm.per_seed.values()))
    b = stats.as_values([base.per_seed[s] for s in seeds] if paired else list(base.per_seed.values()))
    if float(a.min()) <= 0.0 or float(b.min()) <= 0.0:
        # reached at the very start (axis 0): no compute was needed, a ratio means nothing
        estimate, ci, p = math.nan, (math.nan, math.nan), 1.0
    else:
        estimate = float(b.mean() / a.mean())
        counts_b = stats.bootstrap_counts(len(b), n_boot, rng_seed)
        counts_a = counts_b if paired else stats.bootstrap_counts(len(a), n_boot, rng_seed + 1)
        low, high = stats.percentile_interval((counts_b @ b) / (counts_a @ a), confidence)
        ci = (float(low), float(high))
        if paired:
            p = stats.paired_permutation_test((b.log() - a.log()).tolist(), rng_seed=rng_seed).p
        else:
            p = stats.unpaired_permutation_test(b.log().tolist(), a.log().tolist(), rng_seed=rng_seed).p
    censored_arm, censored_base = bool(arm.censored), bool(base.censored)
    bound = {(False, False): "", (False, True): ">=", (True, False): "<=", (True, True): "?"}[
        (censored_arm, censored_base)
    ]
    return Ratio(estimate, ci, p, p, bound, NOT_SEPARATED)


def adjust(ratios: Mapping[str, Ratio], alpha: float) -> dict[str, Ratio]:
    """Holm's adjustment over the arms, and each ratio's verdict."""
    arms = list(ratios)
    adjusted = stats.holm_adjusted([ratios[arm].p for arm in arms])
    out = {}
    for arm, p_holm in zip(arms, adjusted):
        r = ratios[arm]
        separated = p_holm < alpha and not math.isnan(r.ratio) and r.ratio != 1.0
        verdict = NOT_SEPARATED if not separated else FEWER if r.ratio > 1.0 else MORE
        out[arm] = replace(r, p_holm=p_holm, verdict=verdict)
    return out
