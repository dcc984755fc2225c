"""Cases ``fit``, ``fit-legacy`` and ``fit-pilot``: a step of verl's own fit loop with DataFlex over its neighbour
without, in the same run — target <= 1.05.

Each case runs ``python -m verl.trainer.main_ppo`` twice on the CPU harness (:mod:`dataflex_lab.verl.cpu_loop`),
DataFlex on the odd steps of one run and the even steps of the other (the harness's ``alternate``), lr 0 so every
step does the same work but for DataFlex's; the row is :func:`~.timing.balanced_ratio` of the two runs' pairs of
neighbouring steps, verl's warm-up step 1 left out. ``fit``: V1's ``dataflex_sync`` trainer; ``fit-legacy``:
``RayPPOTrainer`` (``trainer.use_v1=false``); ``fit-pilot``: the legacy trainer with ``mechanism: pilot``,
generation excluded (``timing_s/step - timing_s/gen``, the seam's own ``dataflex/pilot/seam_time_s`` put back on
the pilot's steps, since verl's ``gen`` timer holds the stages whole), 40 steps a run: its few ms on steps of about
190 ms whose workers' calls vary by 10-20 ms need 19 pairs a run. Needs verl and ``dataflex_verl`` without trl >=
1.13 beside them (verl 0.9.1's FSDP engine then imports trl's removed PPO value-head model); else a ``skip`` row.
"""

from __future__ import annotations

import importlib.util
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .results import Result, measured, skipped
from .timing import balanced_ratio, run_medians

FIT_TARGET = 1.05
PAIR = {"mechanism": "reweight", "scorer": {"name": "advantage_magnitude"}, "actuator": {"name": "softmax"}}
PILOT = {
    "mechanism": "pilot",
    "scorer": {"name": "group_reward_variance"},
    "actuator": {"name": "threshold_band", "params": {"low": 1.0e-6, "high": 1.0e9}},
    "pilot": {"prompts": 2, "rollouts": 2, "on_short": "backfill"},
}
#: The metric verl's step logs when the harness ran DataFlex in it (1.0) or not (0.0).
ON_METRIC = "dataflex_bench/dataflex_on"
STEP, GEN, SEAM = "timing_s/step", "timing_s/gen", "dataflex/pilot/seam_time_s"
#: case -> (row name, trainer settings, block, steps per run).
CASES = {
    "fit": ("dataflex_sync / sync step in verl's fit loop", {"trainer_mode": "dataflex_sync"}, PAIR, 24),
    "fit-legacy": (
        "RayPPOTrainer's step with / without DataFlex's in verl's legacy fit loop",
        {"trainer_mode": "sync", "use_v1": False}, PAIR, 24,
    ),
    "fit-pilot": (
        "step with / without the pilot's seam, generation excluded, in verl's legacy fit loop",
        {"use_v1": False}, PILOT, 40,
    ),
}  # fmt: skip
QUICK_STEPS = 4


def fit_missing() -> str | None:
    """Why the fit cases cannot run here, or None."""
    for module, dist in (("verl", "verl==0.9.1"), ("dataflex_verl", "dataflex-verl")):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install {dist}); verl's fit loop not measured"
    try:
        from importlib.metadata import version

        from packaging.version import Version

        if Version(version("trl")) >= Version("1.13"):
            return (
                f"trl {version('trl')} is installed beside verl: verl 0.9.1's FSDP engine then imports trl's PPO "
                "value-head model, which trl >= 1.13 removed; run this case where trl is absent (nox -s bench)"
            )
    except Exception:  # noqa: BLE001 - no trl installed is the normal case
        pass
    return None


def step_time(metrics: dict[str, Any]) -> float:
    """verl's whole step time (cases ``fit`` and ``fit-legacy``)."""
    return float(metrics[STEP])


def without_generation(metrics: dict[str, Any]) -> float:
    """A step's time less its generation; a pilot step's seam put back (case ``fit-pilot``)."""
    for name in (STEP, GEN) + ((SEAM,) if metrics.get(ON_METRIC) == 1.0 else ()):
        if name not in metrics:
            raise RuntimeError(f"a step logged no {name!r} (it has {sorted(metrics)[:8]}...): install this checkout")
    rest = float(metrics[STEP]) - float(metrics[GEN])
    return rest + float(metrics[SEAM]) if metrics.get(ON_METRIC) == 1.0 else rest


def paired_steps(
    records: list[dict[str, Any]], time_of: Callable[[dict[str, Any]], float] = step_time
) -> list[tuple[float, float]]:
    """``(with DataFlex, without)`` times of neighbouring steps (2-3, 4-5, ...) of one alternating run.

    Raises ``RuntimeError`` naming the steps when a pair is not one of each (the alternation did not happen).
    """
    by_step = {record["step"]: record["metrics"] for record in records}
    pairs = []
    for first in range(2, max(by_step, default=0), 2):
        if first not in by_step or first + 1 not in by_step:
            continue
        a, b = by_step[first], by_step[first + 1]
        if {a.get(ON_METRIC), b.get(ON_METRIC)} != {0.0, 1.0}:
            raise RuntimeError(
                f"steps {first} and {first + 1} logged {ON_METRIC}={a.get(ON_METRIC)!r} and {b.get(ON_METRIC)!r}: "
                "the run did not alternate DataFlex (is the harness's alternation installed in verl's task runner?)"
            )
        on, off = (a, b) if a[ON_METRIC] == 1.0 else (b, a)
        pairs.append((time_of(on), time_of(off)))
    return pairs


def summarize(case: str, runs: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """The row's figures from the two runs' records (verl's ``step`` and ``metrics`` of every step)."""
    time_of = without_generation if case == "fit-pilot" else step_time
    per_run = [paired_steps(records, time_of) for records in runs]
    pairs = [pair for run in per_run for pair in run]
    if not pairs:
        raise RuntimeError(f"{case} needs neighbouring steps with and without DataFlex after step 1: run >= 3 steps")
    hook = "dataflex/hook_time_s"
    on_steps = [r["metrics"] for run in runs for r in run if r["step"] > 1 and r["metrics"].get(ON_METRIC) == 1.0]
    hooks = [metrics[hook] for metrics in on_steps if hook in metrics]
    return {
        "median_s": statistics.median(on for on, _ in pairs),
        "baseline_s": statistics.median(off for _, off in pairs),
        "ratio": balanced_ratio(per_run),
        "reps": len(pairs),
        "run_ratios": run_medians(per_run),
        "hook_median_s": statistics.median(hooks) if hooks else None,
    }


def run_fit(case: str, *, quick: bool, unjudged: str | None = None, progress=print) -> list[Result]:
    name, trainer, block, steps = CASES[case]
    steps = QUICK_STEPS if quick else steps
    shape = f"8 prompts x 4 samples, responses <= 8 tokens, {steps} steps per run, DataFlex on odd / even steps"
    reason = fit_missing()
    if reason:
        progress(f"  SKIP {case}: {reason}")
        return [skipped(case, name, shape, reason, FIT_TARGET)]
    from dataflex_lab.verl.cpu_loop import runner

    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        workspace = runner.prepare_workspace(Path(tmp) / "workspace")
        for i, parity in enumerate(("odd", "even")):
            spec = runner.RunSpec(
                **trainer, dataflex=block, steps=steps, lr=0.0, dataflex_on_steps=parity,
                experiment=f"bench_{case}_{i}_{parity}",
            )  # fmt: skip
            out, log = Path(tmp) / f"{i}.jsonl", Path(tmp) / f"{i}.log"
            runs.append(runner.run_entry_point(spec, workspace, out, log_file=log))
            progress(f"  {case} run {i + 1}/2 (DataFlex on {parity} steps) done")
    figures = summarize(case, runs)
    return [
        measured(
            case,
            name,
            shape,
            median_s=figures.pop("median_s"),
            baseline_s=figures.pop("baseline_s"),
            ratio=figures.pop("ratio"),
            target=FIT_TARGET,
            reps=figures.pop("reps"),
            unjudged=unjudged,
            note="geometric mean of the two runs' medians of (step with DataFlex / its neighbour without); lr 0",
            extra=figures,
        )  # fmt: skip
    ]
