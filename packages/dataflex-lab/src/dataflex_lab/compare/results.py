"""What a comparison found, as data: per metric, each arm's estimates and its difference from the baseline.

:func:`~.comparison.compare_runs` builds these; the report (:mod:`.report`) and the plot (:mod:`.plot`) read them.
They live below all three, so none of those imports another to name them.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import target as target_

#: The two per-seed summaries of a curve, in report order.
SUMMARIES = ("final", "auc")
#: Verdicts of a difference (Holm-adjusted p below alpha, by the sign of the difference).
HIGHER, LOWER, NOT_SEPARATED = "higher", "lower", "not separated"


@dataclass(frozen=True)
class Estimate:
    """One arm's per-seed values of one summary, their mean, spread (sd over seeds) and bootstrap interval."""

    per_seed: dict[int, float]
    mean: float
    sd: float
    ci: tuple[float, float]


@dataclass(frozen=True)
class Difference:
    """``mean(arm) - mean(baseline)`` of one summary, its bootstrap interval, p-value and verdict.

    ``p_holm`` is ``p`` adjusted over every arm compared with the baseline on
    the same metric and summary; the verdict uses it. ``min_p`` is the
    smallest p the test can give with these seeds. ``sd`` is the spread of
    one seed's difference (sd of the per-seed differences when paired, else
    ``sqrt(sd_arm**2 + sd_baseline**2)``): the number that decides how many
    seeds a given effect needs (see the docs' "How many seeds").
    """

    estimate: float
    ci: tuple[float, float]
    sd: float
    p: float
    p_holm: float
    paired: bool
    test: str
    min_p: float
    verdict: str


@dataclass(frozen=True)
class ArmResult:
    """One arm on one metric: an :class:`Estimate` per summary, and a :class:`Difference` unless it is the baseline."""

    arm: str
    seeds: tuple[int, ...]
    estimates: dict[str, Estimate]
    differences: dict[str, Difference] | None


@dataclass(frozen=True)
class MetricResult:
    """Every arm on one metric, the steps compared, and the curves (arm -> seed -> value per step) for plots.

    ``x`` is the axis the summaries are taken on, ``axes`` each run's position on it per step and ``budget`` the
    axis value every run reached (the summaries stop there: equal compute). With a ``target``, ``reach`` is
    each arm's time to it and ``ratios`` each other arm's ratio to the baseline.
    """

    metric: str
    steps: tuple[int, ...]
    window: int
    arms: tuple[ArmResult, ...]
    curves: dict[str, dict[int, tuple[float, ...]]]
    x: str = "step"
    axes: dict[str, dict[int, tuple[float, ...]]] | None = None
    budget: float | None = None
    target: float | None = None
    reach: dict[str, target_.Reach] | None = None
    ratios: dict[str, target_.Ratio] | None = None

    @property
    def window_steps(self) -> tuple[int, ...]:
        return self.steps[-self.window :]
