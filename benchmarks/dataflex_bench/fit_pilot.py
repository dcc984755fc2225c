"""Case ``fit-pilot``: the staged-generation seam's own cost per step in verl's legacy fit loop, generation excluded
(issue 37's target).

Runs ``python -m verl.trainer.main_ppo`` on the CPU harness (:mod:`dataflex_lab.verl.cpu_loop`) with verl's legacy
``RayPPOTrainer.fit`` (``trainer.use_v1=false``) and ``mechanism: pilot`` (:data:`BLOCK`: two pilot rollouts for
twice the batch's prompts, admitted when their rewards vary at all, the commit tops them up to ``rollout.n``, a
short step backfilled); lr 0, so the policy never moves. As case ``fit-legacy``: two runs, the pilot's stages and
DataFlex's step on the odd steps of one and the even steps of the other, verl's own step alone on the rest (fit
generates the prompts it pulled; the harness's :mod:`~dataflex_lab.verl.cpu_loop.alternate`), each step with the
pilot compared with its neighbour without. Per step, without generation:

- without the pilot: verl's ``timing_s/step - timing_s/gen``: the reward, old log-prob and actor-update calls,
  ``_balance_batch``, the advantage and the weight sync;
- with the pilot: ``timing_s/step - timing_s/gen + dataflex/pilot/seam_time_s``. verl's ``gen`` there holds the
  stages (handed to fit's ``gen`` and ``step`` timers: they run before fit's timers start) and fit's own generate
  block (the prepared rows handed back and the replicas put to sleep, which the baseline's ``gen`` holds too); the
  seam's own time (stage bookkeeping, the prompt table, the admission, the top-up assembly: the stages' time less
  the replicas' generate calls, ``dataflex/pilot/generation_time_s``) stays in. DataFlex's step at
  ``compute_advantage`` is in it too (the steps without have none).

The ratio is the geometric mean of the two runs' medians of the paired ratios (odd / even parity effects cancel,
as in ``fit``). Whole runs of identical work differ by more than the seam's few ms
on this machine (four whole runs, alternated without / pilot / pilot / without, read 0.91-1.05 over seven bench
runs), so neighbours in one run are compared. The row also gives the ratio inside each pilot step (its step without
generation over the same less the seam's time: blind to what the seam costs outside its own timer). Needs what case
``fit`` needs.
"""

from __future__ import annotations

import statistics
from typing import Any

from .fit import (
    FIT_TARGET,
    PARITY_ORDER,
    after_warmup,
    balanced_ratio,
    fit_missing,
    paired_ratios,
    run_arms,
    run_medians,
)
from .results import Result, measured

CASE = "fit-pilot"
NAME = "step with / without the pilot's seam, generation excluded, in verl's legacy fit loop"
BLOCK = {
    "mechanism": "pilot",
    "scorer": {"name": "group_reward_variance"},
    "actuator": {"name": "threshold_band", "params": {"low": 1.0e-6, "high": 1.0e9}},
    "pilot": {"prompts": 2, "rollouts": 2, "on_short": "backfill"},
}
STEP, GEN = "timing_s/step", "timing_s/gen"
#: Steps per run (quick mode 4). More than case ``fit``'s 24: the pilot's steps cost about 7 ms more than their
#: neighbours (the seam's 5-6 ms, DataFlex's step at ``compute_advantage``) on steps of about 190 ms whose workers'
#: calls vary by 10-20 ms from one step to the next, so with 11 pairs a run the two runs' medians read 0.96-1.13
#: (2026-12-06) and the row missed its 1.05 in two of six full runs on a cost of 1.035; 19 pairs a run.
PILOT_STEPS = 40


def _names() -> tuple[str, str, str, str]:
    """The legacy host's stage metrics (stages' time, their generation, the seam's) and the pilot's stage count,
    imported when a run is read (``dataflex_verl`` is not installed in the TRL environment)."""
    from dataflex_core.mechanisms.pilot.stages import PILOT_PREFIX
    from dataflex_verl.legacy_stages import GENERATION_TIME, SEAM_TIME, STAGES_TIME

    return STAGES_TIME, GENERATION_TIME, SEAM_TIME, f"{PILOT_PREFIX}stages"


def _metric(metrics: dict[str, Any], name: str, arm: str) -> float:
    if name not in metrics:
        fix = (
            "dataflex-verl older than its seam_time_s metric is installed in verl's processes; install this checkout"
            if name.startswith("dataflex/")
            else "verl logged no such timer"
        )
        raise RuntimeError(f"the {arm} run's step logged no {name!r} (it has {sorted(metrics)[:8]}...): {fix}")
    return float(metrics[name])


def without_generation(metrics: dict[str, Any], staged: bool) -> float:
    """A step's time less its generation: verl's ``step - gen``; with the pilot's stages, their seam's own time put
    back (verl's ``gen`` holds the stages whole)."""
    arm = "pilot" if staged else "without"
    rest = _metric(metrics, STEP, arm) - _metric(metrics, GEN, arm)
    return rest + _metric(metrics, _names()[2], arm) if staged else rest


def _on(metrics: dict[str, Any]) -> bool:
    from dataflex_lab.verl.cpu_loop.alternate import ON_METRIC

    return metrics.get(ON_METRIC) == 1.0


def _step_time(metrics: dict[str, Any]) -> float:
    return without_generation(metrics, staged=_on(metrics))


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The figures of two alternating runs (verl's records of every step, per run): the paired ratios' median per
    run and their geometric mean (:func:`~.fit.balanced_ratio`),
    medians of the step without generation with and without the pilot, and the pilot's seam, stages' generation,
    fit's own generate block and stages per step."""
    from dataflex_lab.verl.cpu_loop.alternate import ON_METRIC

    per_run = [paired_ratios(records, ON_METRIC, _step_time) for records in runs.values()]
    pairs = [pair for run in per_run for pair in run]
    done = [m for records in runs.values() for m in after_warmup(records)]
    steps, without = [m for m in done if _on(m)], [m for m in done if not _on(m)]
    if not pairs:
        raise RuntimeError(
            f"fit-pilot needs neighbouring steps after the warm-up with and without the pilot, got {len(steps)} "
            f"with and {len(without)} without: run at least 3 steps per run"
        )

    def median_ms(values) -> float:
        return statistics.median(values) * 1e3

    stages_time, generation_time, seam_time, stages = _names()
    pilot = [without_generation(m, staged=True) for m in steps]
    b, p = statistics.median(without_generation(m, staged=False) for m in without), statistics.median(pilot)
    return {
        "median_s": p,
        "baseline_s": b,
        "ratio": balanced_ratio(per_run),
        "reps": len(pairs),
        "run_ratios": run_medians(per_run),
        "pooled_ratio": p / b,
        "seam_ms": median_ms(_metric(m, seam_time, "pilot") for m in steps),
        "stages_generation_ms": median_ms(_metric(m, generation_time, "pilot") for m in steps),
        # fit's own generate block with the pilot (prepared rows handed back, replicas put to sleep): out of both
        "fit_gen_block_ms": median_ms(_metric(m, GEN, "pilot") - _metric(m, stages_time, "pilot") for m in steps),
        "gen_without_ms": median_ms(_metric(m, GEN, "without") for m in without),
        "step_without_generation_ms": {"without": b * 1e3, "pilot": p * 1e3},
        "stages_per_step": statistics.median(_metric(m, stages, "pilot") for m in steps),
        # inside each pilot step (its step with the seam over the same step less it): blind to costs the seam causes
        # outside its own timer
        "within_step_ratio": statistics.median(
            with_seam / (with_seam - _metric(m, seam_time, "pilot")) for m, with_seam in zip(steps, pilot)
        ),
    }


def run_fit_pilot(*, quick: bool, unjudged: str | None = None, progress=print) -> list[Result]:
    steps = 4 if quick else PILOT_STEPS
    shape = (
        f"8 prompts x 4 samples, responses <= 8 tokens, pilot 2 x 8 prompts x 2 rollouts, {steps} steps per run, "
        "the pilot on odd / even steps"
    )
    reason = fit_missing()
    if reason:
        progress(f"  SKIP {CASE}: {reason}")
        return [Result(CASE, NAME, shape, status="skip", target=FIT_TARGET, note=reason)]
    from dataflex_lab.verl.cpu_loop import runner

    def spec(i: int, parity: str):
        return runner.RunSpec(
            use_v1=False, dataflex=BLOCK, steps=steps, lr=0.0, dataflex_on_steps=parity,
            experiment=f"bench_pilot_{i}_{parity}",
        )  # fmt: skip

    def rest(done: list[dict[str, Any]]) -> str:
        on = [_step_time(m) for m in done if _on(m)]
        off = [_step_time(m) for m in done if not _on(m)]
        return (
            f"median step without generation {statistics.median(on) * 1e3:.1f} ms with the pilot, "
            f"{statistics.median(off) * 1e3:.1f} ms without"
        )

    figures = summarize(run_arms(PARITY_ORDER, spec, CASE, progress, summary=rest))
    return [
        measured(
            CASE,
            NAME,
            shape,
            median_s=figures.pop("median_s"),
            baseline_s=figures.pop("baseline_s"),
            ratio=figures.pop("ratio"),
            target=FIT_TARGET,
            reps=figures.pop("reps"),
            unjudged=unjudged,
            note=(
                "geometric mean of the two runs' medians of paired ratios of neighbouring steps (pilot on odd / even "
                "steps): verl's timing_s/step - timing_s/gen "
                "without the pilot; with it the same plus dataflex/pilot/seam_time_s (stages' time less their "
                "generate calls); lr 0"
            ),
            extra=figures,
        )
    ]
