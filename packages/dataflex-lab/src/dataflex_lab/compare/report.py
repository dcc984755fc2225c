"""The report of a comparison: what ``dataflex compare`` prints (one Markdown table per metric, then how to read
it), what ``--json`` writes, and the plot it draws."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dataflex_core.atomic_write import write_text_atomic

from .axis import AXIS_LABELS, FINAL_SHARE
from .cost_model import CostModel
from .results import NOT_SEPARATED, SUMMARIES, ArmResult, MetricResult
from .runs import Run

#: Report format of ``as_dict``/``--json``; bumped only for changes older readers cannot understand.
REPORT_FORMAT = "dataflex-compare/1"


@dataclass(frozen=True)
class ComparisonReport:
    """What :func:`compare_runs` found: per metric, each arm against the baseline.

    ``markdown()`` is the table ``dataflex compare`` prints, ``as_dict()``
    what ``--json`` writes, ``plot(path)`` the curves with bands.
    """

    baseline: str
    arms: tuple[str, ...]
    metrics: tuple[MetricResult, ...]
    runs: tuple[Run, ...]
    test: str
    alpha: float
    confidence: float
    n_boot: int
    rng_seed: int
    #: The constants of the ``modeled`` axis, where a comparison used it.
    cost_model: CostModel | None = None

    def markdown(self) -> str:
        return render_markdown(self)

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": REPORT_FORMAT,
            "baseline": self.baseline,
            "arms": list(self.arms),
            "settings": {
                "test": self.test,
                "alpha": self.alpha,
                "confidence": self.confidence,
                "bootstrap_resamples": self.n_boot,
                "rng_seed": self.rng_seed,
                **({"cost_model": self.cost_model.as_dict()} if self.cost_model is not None else {}),
            },
            "runs": [{"arm": r.arm, "seed": r.seed, "source": r.source} for r in self.runs],
            "metrics": {
                m.metric: {
                    "x": m.x,
                    "budget": m.budget,
                    **({"target": _target_dict(m)} if m.target is not None else {}),
                    "steps": [m.steps[0], m.steps[-1]],
                    "n_steps": len(m.steps),
                    "window": {"points": m.window, "steps": [m.window_steps[0], m.window_steps[-1]]},
                    "arms": {a.arm: _arm_dict(a) for a in m.arms},
                }
                for m in self.metrics
            },
        }

    def write_json(self, path: str | Path) -> None:
        """Write the report as JSON, atomically; a path that is not a regular file's raises
        :class:`~dataflex_core.atomic_write.UnwritableTargetError` naming it."""
        write_text_atomic(path, json.dumps(self.as_dict(), indent=2) + "\n")

    def plot(self, path: str | Path) -> None:
        """Mean curve of each arm with its bootstrap band, one panel per metric (needs matplotlib)."""
        from .plot import plot_report

        plot_report(self.metrics, path, baseline=self.baseline, confidence=self.confidence, rng_seed=self.rng_seed)


def _arm_dict(result: ArmResult) -> dict[str, Any]:
    out: dict[str, Any] = {"seeds": list(result.seeds)}
    for kind in SUMMARIES:
        e = result.estimates[kind]
        entry: dict[str, Any] = {
            "per_seed": {str(s): v for s, v in e.per_seed.items()},
            "mean": e.mean,
            "sd": e.sd,
            "ci": list(e.ci),
        }
        if result.differences is not None:
            d = result.differences[kind]
            entry["vs_baseline"] = {
                "difference": d.estimate,
                "ci": list(d.ci),
                "sd": d.sd,
                "p": d.p,
                "p_holm": d.p_holm,
                "paired": d.paired,
                "test": d.test,
                "min_p": d.min_p,
                "verdict": d.verdict,
            }
        out[kind] = entry
    return out


def _target_dict(metric: MetricResult) -> dict[str, Any]:
    out: dict[str, Any] = {"level": metric.target, "arms": {}}
    for arm, r in (metric.reach or {}).items():
        entry: dict[str, Any] = {
            "per_seed": {str(s): v for s, v in r.per_seed.items()},
            "reached": {str(s): ok for s, ok in r.reached.items()},
            "mean": r.mean,
            "ci": list(r.ci),
        }
        ratio = (metric.ratios or {}).get(arm)
        if ratio is not None:
            entry["vs_baseline"] = {
                "ratio": ratio.ratio,
                "ci": list(ratio.ci),
                "p": ratio.p,
                "p_holm": ratio.p_holm,
                "bound": ratio.bound,
                "verdict": ratio.verdict,
            }
        out["arms"][arm] = entry
    return out


# -- the Markdown table ---------------------------------------------------------------------------------

SUMMARY_LABELS = {"final": "final", "auc": "AUC"}
#: Below this many seeds, percentile bootstrap intervals are noticeably narrower than their stated level.
FEW_SEEDS = 10


def render_markdown(report: ComparisonReport) -> str:
    lines = ["# dataflex compare", "", _runs_line(report), ""]
    for metric in report.metrics:
        lines += _metric_section(report, metric)
    lines += _notes(report)
    return "\n".join(lines) + "\n"


def _runs_line(report: ComparisonReport) -> str:
    seeds = {arm: sorted(r.seed for r in report.runs if r.arm == arm) for arm in report.arms}
    arms = ", ".join(
        f"`{arm}` ({'baseline, ' if arm == report.baseline else ''}seeds {_seed_list(seeds[arm])})"
        for arm in report.arms
    )
    return f"{len(report.runs)} runs; arms {arms}."


def _metric_section(report: ComparisonReport, metric: MetricResult) -> list[str]:
    steps, window = metric.steps, metric.window_steps
    if metric.x == "step":
        scope = (
            f"Steps {steps[0]}–{steps[-1]} ({len(steps)} logged points). **final**: mean of the last "
            f"{metric.window} points (steps {window[0]}–{window[-1]}); **AUC**: area under the curve divided by the "
            "steps it spans (the curve's average height)."
        )
    else:
        label = AXIS_LABELS[metric.x]
        scope = (
            f"At equal compute, on the axis **{label}**: every run up to {metric.budget:,.0f} {label} (the budget "
            f"all of them reached; steps {steps[0]}–{steps[-1]} logged, {len(steps)} points). **final**: the curve's "
            f"average height over the last {FINAL_SHARE:.0%} of that budget; **AUC**: over all of it (area under the "
            f"curve over {label} divided by the span)."
        )
        if metric.x == "modeled" and report.cost_model is not None:
            scope += f" Modeled seconds: {report.cost_model.describe()}."
    lines = [
        f"## `{metric.metric}`",
        "",
        scope,
        "",
        f"| arm | seeds | summary | mean [{_percent(report.confidence)} CI] | sd over seeds "
        f"| Δ vs `{report.baseline}` [{_percent(report.confidence)} CI] | p | p (Holm) | verdict |",
        "| --- | ---: | --- | --- | ---: | --- | ---: | ---: | --- |",
    ]
    digits = _decimals(metric)
    for arm in metric.arms:
        lines += [_row(report, arm, kind, digits) for kind in SUMMARIES]
    lines.append("")
    if metric.target is not None:
        lines += _target_section(report, metric)
    return lines


def _row(report: ComparisonReport, arm: ArmResult, kind: str, digits: int) -> str:
    e = arm.estimates[kind]
    name = f"`{arm.arm}` (baseline)" if arm.arm == report.baseline else f"`{arm.arm}`"
    number = f"{{:.{digits}f}}".format
    cells = [name, str(len(arm.seeds)), SUMMARY_LABELS[kind], f"{number(e.mean)} {_interval(e.ci, number)}"]
    cells.append(number(e.sd))
    if arm.differences is None:
        cells += ["", "", "", ""]
    else:
        d = arm.differences[kind]
        signed = f"{{:+.{digits}f}}".format
        verdict = d.verdict if d.verdict == NOT_SEPARATED else f"**{d.verdict}**"
        cells += [f"{signed(d.estimate)} {_interval(d.ci, signed)}", _p(d.p), _p(d.p_holm), verdict]
    return "| " + " | ".join(cells) + " |"


def _target_section(report: ComparisonReport, metric: MetricResult) -> list[str]:
    label = AXIS_LABELS[metric.x]
    level = f"{metric.target:g}"
    lines = [
        f"### {label.capitalize()} to reach `{metric.metric}` >= {level}",
        "",
        f"The {label} at which each run first reached {level} (linear between logged points), within the "
        f"{metric.budget:,.0f} {label} every run reached. A run that did not reach it counts the budget: it needed "
        "more, so the ratio is then a bound (>= / <= / ?, see notes). The ratio is the geometric mean over seeds "
        f"of `{report.baseline}`'s time / the arm's (above 1: the arm needed less); its p and interval test the "
        "mean per-seed log ratio.",
        "",
        f"| arm | reached | {label} per seed | mean [{_percent(report.confidence)} CI] "
        f"| `{report.baseline}` / arm [{_percent(report.confidence)} CI] | p | p (Holm) | verdict |",
        "| --- | ---: | --- | --- | --- | ---: | ---: | --- |",
    ]
    for arm, reach in (metric.reach or {}).items():
        name = f"`{arm}` (baseline)" if arm == report.baseline else f"`{arm}`"
        shown = ", ".join(
            f"{value:,.0f}" if reach.reached[seed] else f"> {value:,.0f}" for seed, value in reach.per_seed.items()
        )
        cells = [
            name,
            f"{sum(reach.reached.values())}/{len(reach.reached)}",
            shown,
            f"{reach.mean:,.0f} [{reach.ci[0]:,.0f}, {reach.ci[1]:,.0f}]",
        ]
        ratio = (metric.ratios or {}).get(arm)
        if ratio is None:
            cells += ["", "", "", ""]
        elif math.isnan(ratio.ratio):
            cells += ["reached at the start", "", "", NOT_SEPARATED]
        else:
            bound = f"{ratio.bound} " if ratio.bound else ""
            verdict = ratio.verdict if ratio.verdict == NOT_SEPARATED else f"**{ratio.verdict}**"
            cells += [
                f"{bound}{ratio.ratio:.2f}x {_interval(ratio.ci, _times)}",
                _p(ratio.p),
                _p(ratio.p_holm),
                verdict,
            ]
        lines.append("| " + " | ".join(cells) + " |")
    notes = {
        ">=": "only baseline runs never reached it, so the arm's saving is at least this",
        "<=": "only the arm's runs never reached it, so its saving is at most this",
        "?": "runs of both never reached it: the ratio bounds nothing; run longer or lower --target",
    }
    used = sorted({r.bound for r in (metric.ratios or {}).values() if r.bound})
    lines += ["", *(f"- `{bound}`: {notes[bound]}." for bound in used)] if used else []
    return lines + [""]


def _decimals(metric: MetricResult) -> int:
    """One number of decimals per table: four significant digits of its largest mean or spread."""
    scale = max(max(abs(e.mean), e.sd) for arm in metric.arms for e in arm.estimates.values())
    return 4 if scale == 0 else min(8, max(0, 3 - math.floor(math.log10(scale))))


def _notes(report: ComparisonReport) -> list[str]:
    notes: list[str] = []
    first = next((m for m in report.metrics if len(m.arms) > 1), None)
    others = [a for a in first.arms if a.differences is not None] if first else []
    groups: dict[tuple[bool, str, float], list[ArmResult]] = {}
    for arm in others:
        d = arm.differences["final"]
        groups.setdefault((d.paired, d.test, d.min_p), []).append(arm)
    for (paired, test, min_p), arms in groups.items():
        names = ", ".join(f"`{a.arm}`" for a in arms)
        seeds = len(arms[0].seeds)
        how = f"paired by seed ({seeds} common seeds)" if paired else "unpaired (the arms do not share their seeds)"
        notes.append(f"Δ and p for {names}: {how}; p from the {test}, two-sided.")
        if min_p * len(others) >= report.alpha:
            notes.append(_unreachable(arms[0], report, paired, min_p, len(others)))
    if others:
        notes.append(
            f"verdict: **higher** or **lower** when p, Holm-adjusted over the {len(others)} arm(s) compared with the "
            f"baseline, is below α = {report.alpha:g}; otherwise *not separated*: these seeds cannot tell the arm from "
            "the baseline, which is not the same as showing they are equal."
        )
    fewest = min(len(a.seeds) for a in report.metrics[0].arms)
    level = _p(1.0 - report.confidence)
    notes.append(
        f"The intervals of Δ and of the ratio are the shifts the test that gives p does not reject at {level} "
        f"(the test inverted): an interval excludes 0 (1x for a ratio) exactly when p < {level}. The verdict reads "
        "p (Holm), so a row with p below it can still be *not separated* after the adjustment; an infinite end "
        "means no shift that far is rejected (too few seeds)."
    )
    means = (
        f"The interval of each arm's own mean: {_percent(report.confidence)} percentile bootstrap over seeds "
        f"({report.n_boot} resamples, RNG seed {report.rng_seed})"
    )
    if fewest < FEW_SEEDS:
        means += f", narrower than its level from {fewest} seeds (a bootstrap cannot see spread they did not show)"
    notes.append(means + ".")
    return ["## How to read this", "", *(f"- {note}" for note in notes)]


def _unreachable(arm: ArmResult, report: ComparisonReport, paired: bool, min_p: float, compared: int) -> str:
    """The note for a test that cannot reach alpha with these seeds (Holm multiplies the smallest p by ``compared``)."""
    n = len(arm.seeds)
    needed = next(k for k in range(2, 64) if compared * _smallest_p(k, paired) < report.alpha)
    unit = "paired seeds" if paired else "seeds per arm"
    holm = f" ({_p(min(1.0, min_p * compared))} after Holm over {compared} arms)" if compared > 1 else ""
    return (
        f"**With {n} {unit} this test cannot give p below {_p(min_p)}{holm}, so no arm can separate from the "
        f"baseline at α = {report.alpha:g} whatever the data.** That takes at least {needed} {unit} to be possible "
        "at all, and more for a fair chance (see 'How many seeds' in the docs); --test t can go lower because it "
        "assumes the seeds' values are normally distributed."
    )


def _smallest_p(n: int, paired: bool) -> float:
    """Smallest p of the exact permutation test with ``n`` paired seeds, or ``n`` seeds in each of two arms."""
    return 2 / 2**n if paired else 2 / math.comb(2 * n, n)


def _seed_list(seeds: list[int]) -> str:
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}–{seeds[-1]}"
    return ",".join(map(str, seeds))


def _percent(confidence: float) -> str:
    return f"{confidence * 100:g}%"


def _interval(ci: tuple[float, float], number: Callable[[float], str]) -> str:
    def end(value: float) -> str:
        return ("+inf" if value > 0 else "-inf") if math.isinf(value) else number(value)

    return f"[{end(ci[0])}, {end(ci[1])}]"


def _times(value: float) -> str:
    return f"{value:.2f}"


def _p(p: float) -> str:
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"
