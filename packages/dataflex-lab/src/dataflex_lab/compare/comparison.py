"""Does an arm beat the baseline? Per-seed summaries of each run, compared over seeds.

Each run's curve of a metric is reduced to two numbers per seed, the mean of
its final window and its area under the curve, and the seeds of each arm are
then compared with the baseline's: a bootstrap interval for each mean and for
the difference, and a two-sided test (paired by seed when the arms share their
seeds), Holm-adjusted over the arms compared with the baseline.
"""

from __future__ import annotations

import difflib
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

from . import axis as axes_
from . import stats
from . import target as target_
from .cost_model import CostModel
from .readers import runs_from_demo
from .report import ComparisonReport
from .results import HIGHER, LOWER, NOT_SEPARATED, SUMMARIES, ArmResult, Difference, Estimate, MetricResult
from .runs import CompareError, Run, by_arm

#: Tried in order when no metric is named: verl's reward, TRL's reward, TRL's reward as TensorBoard tags it.
DEFAULT_METRICS = ("critic/score/mean", "reward", "train/reward")
#: Final window when none is given: the last 10 logged points, or every point of a shorter run after step 0.
DEFAULT_WINDOW = 10
TESTS = ("permutation", "t")
PAIRINGS = ("auto", "paired", "unpaired")


def compare_runs(
    runs: Iterable[Run | Mapping[str, Any]] | Mapping[str, Any],
    *,
    baseline: str | None = None,
    metrics: Sequence[str] | None = None,
    window: int | None = None,
    max_step: int | None = None,
    arms: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    test: Literal["permutation", "t"] = "permutation",
    pairing: Literal["auto", "paired", "unpaired"] = "auto",
    alpha: float = 0.05,
    confidence: float = stats.CONFIDENCE,
    n_boot: int = stats.N_BOOTSTRAP,
    rng_seed: int = stats.RNG_SEED,
    x: str = "step",
    target: float | None = None,
    cost_model: CostModel | None = None,
) -> ComparisonReport:
    """Compare every arm with ``baseline`` over seeds, per metric, on the final window and the area under the curve.

    :param runs: :class:`Run` objects, records shaped like the demo format's
        ``"runs"`` entries (``{"arm", "seed", "steps": [{"step", "metrics"}]}``),
        or a whole ``dataflex-demo/1`` document.
    :param baseline: the arm the others are compared with; default the first arm.
    :param metrics: metric names; default the metric the runs' file declares (a demo's held-out reward), else the
        first of :data:`DEFAULT_METRICS` every run logs.
    :param window: the final window, in logged points; default ``min(10, points logged)``.
    :param max_step: ignore steps after this one (to compare runs of different lengths on their common part).
    :param arms: keep only these arms, in this order.
    :param seeds: keep only these seeds.
    :param test: ``"permutation"`` (exact or Monte-Carlo; no normality assumed) or ``"t"`` (paired t / Welch).
    :param pairing: ``"auto"`` pairs by seed when an arm has exactly the baseline's seeds, compares
        unpaired when they share none, and refuses a partial overlap; ``"paired"`` / ``"unpaired"`` force it.
    :param alpha: the verdict's threshold on the Holm-adjusted p-value.
    :param confidence: the level of every bootstrap interval.
    :param n_boot: bootstrap resamples per interval.
    :param rng_seed: seed of every random draw (bootstrap, Monte-Carlo permutations): same runs, same report.
    :param x: the axis, ``step`` or the compute spent (``rollouts``, ``tokens``, ``seconds``, ``optimizer_steps``,
        ``modeled``; :mod:`.axis`): the area and final window are taken up to the budget every run reached on it.
    :param target: a level of each metric: also the compute each arm needed to reach it, and its ratio to the
        baseline's (:mod:`.target`).
    :param cost_model: the constants of ``x="modeled"`` (:class:`~.cost_model.CostModel`).
    :returns: a :class:`ComparisonReport`; ``.markdown()`` gives the table.
    :raises CompareError: unknown metric or arm, missing steps, unequal seeds, fewer than 2 seeds in an arm.
    """
    if test not in TESTS:
        raise CompareError(f"test {test!r} is not one of {TESTS}")
    if pairing not in PAIRINGS:
        raise CompareError(f"pairing {pairing!r} is not one of {PAIRINGS}")
    if not 0.0 < alpha < 1.0 or not 0.0 < confidence < 1.0:
        raise CompareError(f"alpha ({alpha}) and confidence ({confidence}) must lie strictly between 0 and 1")
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 1:
        raise CompareError(f"n_boot {n_boot!r} must be a positive number of bootstrap resamples (default 10000)")
    axes_.check_axis(x)
    if target is not None and (
        isinstance(target, bool) or not isinstance(target, (int, float)) or not math.isfinite(target)
    ):
        raise CompareError(f"--target {target!r} must be a finite number (a level of the metric, e.g. 0.25)")
    selected = _select(_as_runs(runs), arms, seeds)
    grouped = by_arm(selected)
    baseline = _resolve_baseline(grouped, baseline)
    grouped = {baseline: grouped[baseline], **grouped}  # the baseline leads every table
    _require_seeds(grouped)
    paired = {arm: _paired(arm, grouped[arm], baseline, grouped[baseline], pairing) for arm in grouped}
    names = resolve_metrics(selected, metrics)
    results = []
    for metric in names:
        # on a compute axis a run's points need not share steps with the others' (a filter that stopped at the
        # rollout budget ends sooner): each is put on the axis at its own steps
        same = x == "step"  # optimizer_steps: each run at its own steps, as on a compute axis
        steps, curves = aligned_curves(grouped, metric, max_step, same_steps=same)
        width = _window(window, steps, metric)
        axes = {arm: {seed: axes_.axis_values(run, x, steps if same else _run_steps(run, metric, max_step), cost_model)
                      for seed, run in sorted(seeds.items())}
                for arm, seeds in grouped.items()}  # fmt: skip
        result = _compare_metric(
            metric, steps, width, curves, axes, baseline, paired, test, alpha, confidence, n_boot, rng_seed
        )
        if target is not None:
            result = _with_target(result, target, paired, test, alpha, confidence, n_boot, rng_seed)
        results.append(replace(result, x=x))
    return ComparisonReport(
        baseline=baseline,
        arms=tuple(grouped),
        metrics=tuple(results),
        runs=tuple(selected),
        test=test,
        alpha=alpha,
        confidence=confidence,
        n_boot=n_boot,
        rng_seed=rng_seed,
        cost_model=cost_model,
    )


# -- which runs, which arms, which seeds ------------------------------------------------------------------


def _as_runs(runs: Iterable[Run | Mapping[str, Any]] | Mapping[str, Any]) -> list[Run]:
    if isinstance(runs, Mapping):
        return runs_from_demo(dict(runs))
    out = [run if isinstance(run, Run) else Run.from_record(run) for run in runs]
    if not out:
        raise CompareError("no runs to compare")
    return out


def _select(runs: list[Run], arms: Sequence[str] | None, seeds: Sequence[int] | None) -> list[Run]:
    present_arms = list(dict.fromkeys(r.arm for r in runs))
    if arms is not None:
        unknown = [a for a in arms if a not in present_arms]
        if unknown:
            raise CompareError(f"arm(s) {unknown} not among the runs; arms present: {present_arms}")
        runs = sorted((r for r in runs if r.arm in arms), key=lambda r: list(arms).index(r.arm))
    if seeds is not None:
        present = {r.seed for r in runs}
        unknown = [s for s in seeds if s not in present]
        if unknown:
            raise CompareError(f"seed(s) {unknown} not among the runs; seeds present: {sorted(present)}")
        runs = [r for r in runs if r.seed in seeds]
    return runs


#: ``--baseline`` names that mean "the arm the file declares its baseline" (the hosts' demos call it sync / baseline).
BASELINE_ALIASES = ("baseline", "sync")


def _resolve_baseline(grouped: dict[str, dict[int, Run]], baseline: str | None) -> str:
    """The named arm; unnamed, the arm the files declare their baseline, else the first arm."""
    declared = [arm for arm, seeds in grouped.items() if any(run.baseline for run in seeds.values())]
    if baseline is None:
        return declared[0] if len(declared) == 1 else next(iter(grouped))
    if baseline not in grouped:
        if baseline in BASELINE_ALIASES and len(declared) == 1:
            return declared[0]  # verl's demo calls it sync, TRL's baseline: either name works on both
        close = difflib.get_close_matches(baseline, list(grouped), n=3)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise CompareError(f"baseline arm {baseline!r} is not among the runs (arms: {list(grouped)}){hint}")
    return baseline


def _require_seeds(grouped: dict[str, dict[int, Run]]) -> None:
    single = {arm: sorted(seeds) for arm, seeds in grouped.items() if len(seeds) < 2}
    if not single:
        return
    which = "every arm has" if len(single) == len(grouped) else f"arm(s) {list(single)} have"
    raise CompareError(
        f"{which} a single seed ({', '.join(f'{a}@{s[0]}' for a, s in single.items())}): a confidence interval "
        "or a p-value over seeds needs at least 2 seeds per arm, and telling a method from the baseline usually "
        "needs many more (see 'How many seeds' in the compare docs). Run more seeds (the demos: --seeds K)."
    )


def _paired(arm: str, seeds: Mapping[int, Run], baseline: str, base_seeds: Mapping[int, Run], pairing: str) -> bool:
    mine, theirs = set(seeds), set(base_seeds)
    if pairing == "unpaired":
        return False
    if mine == theirs:
        return True
    if pairing == "auto" and not mine & theirs:
        return False  # separately seeded runs: nothing to pair
    missing_here, missing_there = sorted(theirs - mine), sorted(mine - theirs)
    detail = []
    if missing_here:
        detail.append(f"seed(s) {missing_here} of the baseline are missing from {arm!r}")
    if missing_there:
        detail.append(f"seed(s) {missing_there} of {arm!r} are missing from the baseline")
    common = sorted(mine & theirs)
    keep = f"keep only the common seeds with --seeds {','.join(map(str, common))}, " if len(common) >= 2 else ""
    raise CompareError(
        f"unequal seeds: arm {arm!r} has seeds {sorted(mine)} and the baseline {baseline!r} has {sorted(theirs)} "
        f"({'; '.join(detail)}). Runs are compared seed by seed, so every arm needs the baseline's seeds: rerun "
        f"the missing seeds, {keep}or compare without pairing with --unpaired."
    )


# -- which metrics, which steps ---------------------------------------------------------------------------


def resolve_metrics(runs: Sequence[Run], metrics: Sequence[str] | None) -> list[str]:
    """The metric names to compare, checked against what every run logged (close matches on a typo)."""
    common = set.intersection(*(r.metric_names() for r in runs))
    anywhere = set.union(*(r.metric_names() for r in runs))
    if metrics is None:
        declared = sorted({r.metric for r in runs if r.metric is not None})
        if len(declared) > 1:
            raise CompareError(
                f"the files declare different metrics to compare on ({', '.join(declared)}); name one with --metric"
            )
        if declared:
            if declared[0] not in common:
                lacking = [r.describe() for r in runs if declared[0] not in r.metric_names()]
                raise CompareError(
                    f"the file declares metric {declared[0]!r} for its comparison, but {_listing(lacking, 10)} "
                    "never logged it; name another with --metric"
                )
            return declared
        for name in DEFAULT_METRICS:
            if name in common:
                return [name]
        raise CompareError(
            f"no metric named and none of the reward metrics {list(DEFAULT_METRICS)} is logged by every run; "
            f"name one with --metric. {_available(common)}"
        )
    if not metrics:
        raise CompareError("an empty list of metrics; name at least one (or pass None for the reward metric)")
    for name in metrics:
        if name in common:
            continue
        if name in anywhere:
            lacking = [r.describe() for r in runs if name not in r.metric_names()]
            raise CompareError(
                f"metric {name!r} is not logged by every run; it is missing from {_listing(lacking, 10)}"
            )
        if any(name in r.non_numeric for r in runs):
            raise CompareError(f"metric {name!r} is logged with values that are not numbers (e.g. lists)")
        close = difflib.get_close_matches(name, sorted(anywhere), n=3, cutoff=0.6)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise CompareError(f"unknown metric {name!r}: no run logs it.{hint} {_available(common)}")
    return list(dict.fromkeys(metrics))


def _run_steps(run: Run, metric: str, max_step: int | None) -> list[int]:
    return [s for s, _ in run.curve(metric) if max_step is None or s <= max_step]


def aligned_curves(
    grouped: Mapping[str, Mapping[int, Run]], metric: str, max_step: int | None = None, *, same_steps: bool = True
) -> tuple[tuple[int, ...], dict[str, dict[int, tuple[float, ...]]]]:
    """The steps runs logged ``metric`` at, and each run's values there.

    ``same_steps`` (a step axis): every run must log the same steps, else an error; without it (a compute axis)
    each run keeps its own steps and the union is returned.
    """
    per_run = {
        run: [(s, v) for s, v in run.curve(metric) if max_step is None or s <= max_step]
        for seeds in grouped.values()
        for run in seeds.values()
    }
    empty = [run.describe() for run, curve in per_run.items() if not curve]
    if empty:
        raise CompareError(f"metric {metric!r}: no value at or before --max-step {max_step} in {_listing(empty, 5)}")
    step_sets = {run: {s for s, _ in curve} for run, curve in per_run.items()}
    union = sorted(set.union(*step_sets.values()))
    short = {run: sorted(set(union) - got) for run, got in step_sets.items() if len(got) < len(union)}
    if short and same_steps:
        lines = [
            f"  {run.describe()}: missing step(s) {_listing(missing, 8)} (logs {len(step_sets[run])} of {len(union)})"
            for run, missing in short.items()
        ]
        last = min(max(got) for got in step_sets.values())
        truncated = {frozenset(s for s in got if s <= last) for got in step_sets.values()}
        fix = (
            f"every run logs the steps up to {last}: compare those with --max-step {last}, or rerun the short runs"
            if len(truncated) == 1
            else "fix or rerun those runs (the final window and the area need the same steps in every run)"
        )
        raise CompareError(f"metric {metric!r}: runs log different steps:\n" + "\n".join(lines) + f"\n{fix}")
    not_finite = {
        run: [s for s, v in curve if math.isnan(v)]
        for run, curve in per_run.items()
        if any(math.isnan(v) for _, v in curve)
    }
    if not_finite:
        where = "; ".join(f"{run.describe()} at step(s) {_listing(s, 8)}" for run, s in not_finite.items())
        raise CompareError(
            f"metric {metric!r} is not a finite number in {where} (NaN, inf, or null, which is how verl's file "
            "logger writes NaN): the run diverged or the metric was undefined there; use --max-step to stop before it"
        )
    curves = {
        arm: {seed: tuple(v for _, v in per_run[run]) for seed, run in sorted(seeds.items())}
        for arm, seeds in grouped.items()
    }
    return tuple(union), curves


def _window(window: int | None, steps: Sequence[int], metric: str) -> int:
    """The final window in logged points: never step 0, the evaluation of the untrained model."""
    trained = sum(1 for s in steps if s > 0)
    if trained == 0:
        raise CompareError(
            f"metric {metric!r} is logged at step 0 only (before any training): there is no final value to compare; "
            "log it at a trained step (the demos: --val-every N within --steps)"
        )
    if window is None:
        return min(DEFAULT_WINDOW, trained)
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise CompareError(f"window {window!r} must be a positive number of logged points")
    if window > trained:
        untrained = " after step 0 (the untrained model's, never part of 'final')" if trained < len(steps) else ""
        raise CompareError(
            f"window {window} is longer than the {trained} points metric {metric!r} is logged at{untrained} "
            f"(steps {steps[0]}-{steps[-1]}); pass --window {trained} or less"
        )
    return window


# -- the numbers ------------------------------------------------------------------------------------------


def summarize_curve(steps: Sequence[int], values: Sequence[float], window: int) -> dict[str, float]:
    """A curve's two summaries: ``final`` (mean of its last ``window`` points) and ``auc``.

    ``auc`` is the trapezoid area under the curve divided by the span of
    steps, so it is in the metric's own units: the curve's average height
    over training (a single point is its own value).
    """
    final = sum(values[-window:]) / window
    if len(steps) == 1:
        return {"final": final, "auc": values[0]}
    area = sum((steps[i + 1] - steps[i]) * (values[i] + values[i + 1]) / 2 for i in range(len(steps) - 1))
    return {"final": final, "auc": area / (steps[-1] - steps[0])}


def _compare_metric(
    metric: str,
    steps: tuple[int, ...],
    window: int,
    curves: dict[str, dict[int, tuple[float, ...]]],
    axes: dict[str, dict[int, tuple[float, ...]]],
    baseline: str,
    paired: Mapping[str, bool],
    test: str,
    alpha: float,
    confidence: float,
    n_boot: int,
    rng_seed: int,
) -> MetricResult:
    budget = axes_.common_budget([axis for seeds in axes.values() for axis in seeds.values()])
    on_steps = all(axis == tuple(float(s) for s in steps) for seeds in axes.values() for axis in seeds.values())
    values = {
        arm: {
            seed: _summarize_to(axes[arm][seed], curve, budget, window, metric, on_steps)
            for seed, curve in seeds.items()
        }
        for arm, seeds in curves.items()
    }
    estimates = {
        arm: {
            kind: _estimate({s: v[kind] for s, v in per_seed.items()}, confidence, n_boot, rng_seed)
            for kind in SUMMARIES
        }
        for arm, per_seed in values.items()
    }
    others = [arm for arm in curves if arm != baseline]
    unadjusted = {
        (arm, kind): _difference(
            estimates[arm][kind].per_seed,
            estimates[baseline][kind].per_seed,
            paired[arm],
            test,
            confidence,
            n_boot,
            rng_seed,
        )
        for arm in others
        for kind in SUMMARIES
    }
    differences: dict[str, dict[str, Difference]] = {arm: {} for arm in others}
    for kind in SUMMARIES:
        adjusted = stats.holm_adjusted([unadjusted[arm, kind].p for arm in others]) if others else []
        for arm, p_holm in zip(others, adjusted):
            d = unadjusted[arm, kind]
            verdict = NOT_SEPARATED if p_holm >= alpha or d.estimate == 0 else HIGHER if d.estimate > 0 else LOWER
            differences[arm][kind] = replace(d, p_holm=p_holm, verdict=verdict)
    arm_results = tuple(ArmResult(arm, tuple(curves[arm]), estimates[arm], differences.get(arm)) for arm in curves)
    return MetricResult(metric, steps, window, arm_results, curves, axes=axes, budget=budget)


def _summarize_to(
    axis: Sequence[float], curve: Sequence[float], budget: float, window: int, metric: str, on_steps: bool
) -> dict[str, float]:
    """The curve's summaries up to the common budget on its axis: on steps :func:`summarize_curve`, on a compute
    axis its average height over the whole budget (``auc``) and over the budget's last :data:`~.axis.FINAL_SHARE`
    (``final``)."""
    xs, ys = axes_.cut(axis, curve, budget)
    if len(xs) > 1 and xs[-1] == xs[0]:
        raise CompareError(
            f"metric {metric!r}: every point up to the common budget {budget:g} sits at one axis value; the runs "
            "spent no compute between their logged points (compare on --x step)"
        )
    if on_steps:
        return summarize_curve(xs, ys, min(window, sum(1 for x in xs if x > 0) or 1))
    # arms log their points at different compute, so "the last K points" would span different budgets
    start = xs[0] + (1.0 - axes_.FINAL_SHARE) * (xs[-1] - xs[0])
    return {"final": axes_.mean_height(xs, ys, start, xs[-1]), "auc": axes_.mean_height(xs, ys, xs[0], xs[-1])}


def _with_target(
    result: MetricResult,
    level: float,
    paired: Mapping[str, bool],
    test: str,
    alpha: float,
    confidence: float,
    n_boot: int,
    rng_seed: int,
) -> MetricResult:
    """``result`` with each arm's time to ``level`` on its axis and each other arm's ratio to the baseline."""
    base = result.arms[0].arm
    settings = {"confidence": confidence, "n_boot": n_boot, "rng_seed": rng_seed}
    reach = {
        arm: target_.reach({seed: (result.axes[arm][seed], curve) for seed, curve in seeds.items()}, level,
                           budget=result.budget, **settings)
        for arm, seeds in result.curves.items()
    }  # fmt: skip
    ratios = {
        arm: target_.ratio(reach[arm], reach[base], paired[arm], confidence, rng_seed, test)
        for arm in reach
        if arm != base
    }
    return replace(result, target=level, reach=reach, ratios=target_.adjust(ratios, alpha))


def _estimate(per_seed: dict[int, float], confidence: float, n_boot: int, rng_seed: int) -> Estimate:
    values = list(per_seed.values())
    ci = stats.bootstrap_mean_interval(values, confidence=confidence, n_boot=n_boot, rng_seed=rng_seed)
    return Estimate(per_seed, statistics.fmean(values), statistics.stdev(values), ci)


def _difference(
    arm: dict[int, float],
    base: dict[int, float],
    paired: bool,
    test: str,
    confidence: float,
    n_boot: int,
    rng_seed: int,
) -> Difference:
    """The difference before Holm's adjustment (``p_holm`` is ``p`` and the verdict is pending).

    Its p-value and its interval come from one test (:func:`~.stats.shift_test`), so the interval excludes 0
    exactly when p is below ``1 - confidence``.
    """
    if paired:
        a = [arm[s] for s in sorted(base)]
        b = [base[s] for s in sorted(base)]
        spread = statistics.stdev([x - y for x, y in zip(a, b)])
    else:
        a, b = list(arm.values()), list(base.values())
        spread = math.sqrt(statistics.variance(a) + statistics.variance(b))
    result = stats.shift_test(a, b, paired=paired, test=test, confidence=confidence, rng_seed=rng_seed)
    return Difference(
        result.estimate, result.ci, spread, result.p, result.p, paired, result.method, result.min_p, NOT_SEPARATED
    )


def _listing(items: Sequence[Any], limit: int) -> str:
    shown = ", ".join(map(str, items[:limit]))
    return shown + (f", ... ({len(items) - limit} more)" if len(items) > limit else "")


def _available(common: set[str]) -> str:
    if not common:
        return "No metric is logged by every run."
    names = sorted(common)
    return f"Metrics every run logs ({len(names)}): {_listing(names, 40)} (all of them: --list-metrics)."
