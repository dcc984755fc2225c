"""Cases ``fit`` and ``fit-legacy``: verl's own GRPO step with DataFlex over the same step without it.

Runs ``python -m verl.trainer.main_ppo`` on the CPU harness (:mod:`dataflex_lab.verl.cpu_loop`). The learning
rate is 0: the policy never moves, generation is keyed per (step, prompt, sample), so every step rolls out the
same responses and does the same work but for DataFlex's. The pair is the default one (``advantage_magnitude``
-> ``softmax``); verl's warm-up step 1 is left out.

``fit`` (V1, ``dataflex_sync``) and ``fit-legacy`` (verl's legacy ``RayPPOTrainer`` with the ``dataflex:`` block,
``trainer.use_v1=false``): two runs each, DataFlex's step on the odd steps of one and the even steps of the
other, verl's own advantage step alone on the rest (the harness's :mod:`~dataflex_lab.verl.cpu_loop.alternate`).
Whole runs of identical work differ by up to 30 % a step on this machine, so each step with DataFlex is
compared with its neighbour without in the same run; the ratio is the geometric mean of the two runs' medians of
those paired ratios (:func:`balanced_ratio`), so a difference between odd and even steps cancels.

Needs verl and ``dataflex_verl`` in an environment without trl >= 1.13 (verl
0.9.1's FSDP engine imports trl's removed PPO value-head model whenever trl is
installed); otherwise the case is a ``skip`` row.
"""

from __future__ import annotations

import importlib.util
import statistics
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .results import Result, measured

FIT_TARGET = 1.05
PAIR = {
    "mechanism": "reweight",
    "scorer": {"name": "advantage_magnitude", "params": {}},
    "actuator": {"name": "softmax", "params": {}},
}


def fit_missing() -> str | None:
    """Why the fit case cannot run here, or None."""
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


#: The case name per verl trainer line: V1's ``dataflex_sync`` trainer mode, or ``RayPPOTrainer`` with the
#: ``dataflex:`` block (``fit-legacy``, ``trainer.use_v1=false``).
LINES = {
    "v1": ("fit", "dataflex_sync / sync step in verl's fit loop"),
    "legacy": ("fit-legacy", "RayPPOTrainer's step with / without DataFlex's in verl's legacy fit loop"),
}


def after_warmup(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """verl's logged metrics of each step but the first (its warm-up: first calls, caches, compilation)."""
    return [record["metrics"] for record in records if record["step"] > 1]


def run_arms(
    order: Sequence[str],
    spec_of: Callable[[int, str], Any],
    case: str,
    progress=print,
    summary: Callable[[list[dict[str, Any]]], str] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """``python -m verl.trainer.main_ppo`` on the CPU harness for each arm of ``order`` in turn (one workspace),
    ``spec_of(i, arm)`` the i-th run's :class:`~dataflex_lab.verl.cpu_loop.runner.RunSpec`; ``summary`` of the
    metrics of an arm's steps after the warm-up goes to ``progress`` after each run.

    :returns: per arm (each runs once), verl's records of every step (``step`` and ``metrics``).
    """
    from dataflex_lab.verl.cpu_loop import runner

    runs: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        workspace = runner.prepare_workspace(Path(tmp) / "workspace")
        for i, arm in enumerate(order):
            runs[arm] = runner.run_entry_point(
                spec_of(i, arm), workspace, Path(tmp) / f"{i}_{arm}.jsonl", log_file=Path(tmp) / f"{i}_{arm}.log"
            )
            done = after_warmup(runs[arm])
            said = f": {summary(done)}" if summary is not None and done else ""
            progress(f"  {case} run {i + 1}/{len(order)} ({arm}){said}")
    return runs


#: The runs of each line's case: DataFlex on the odd steps of one and the even steps of the other, each step
#: compared with its neighbour without.
PARITY_ORDER = ("odd", "even")
#: Steps per run (two runs per line); quick mode 4.
STEPS = 24


def step_time(metrics: dict[str, Any]) -> float:
    """verl's whole step time."""
    return float(metrics["timing_s/step"])


def paired_ratios(
    records: list[dict[str, Any]], on_metric: str, time_of: Callable[[dict[str, Any]], float] = step_time
) -> list[tuple[float, float]]:
    """``(with DataFlex, without)`` step times (``time_of`` a step's metrics) of neighbouring steps (2-3, 4-5, ...:
    verl's warm-up step 1 left out) of one alternating run, each pair one step with DataFlex and one without
    (``on_metric`` says which).

    Raises ``RuntimeError`` naming the steps when a pair is not one of each (the alternation did not happen).
    """
    by_step = {record["step"]: record["metrics"] for record in records}
    pairs = []
    for first in range(2, max(by_step, default=0), 2):
        if first + 1 not in by_step or first not in by_step:
            continue
        a, b = by_step[first], by_step[first + 1]
        if {a.get(on_metric), b.get(on_metric)} != {0.0, 1.0}:
            raise RuntimeError(
                f"steps {first} and {first + 1} logged {on_metric}={a.get(on_metric)!r} and {b.get(on_metric)!r}: "
                "the run did not alternate DataFlex (is the harness's alternation installed in verl's task runner?)"
            )
        on, off = (a, b) if a[on_metric] == 1.0 else (b, a)
        pairs.append((time_of(on), time_of(off)))
    return pairs


def run_medians(runs: Sequence[Sequence[tuple[float, float]]]) -> list[float]:
    """Each run's median ``with / without`` paired ratio (runs without a pair left out)."""
    return [statistics.median(with_ / without for with_, without in pairs) for pairs in runs if pairs]


def balanced_ratio(runs: Sequence[Sequence[tuple[float, float]]]) -> float:
    """The geometric mean over runs of each run's median ``with / without`` paired ratio.

    The runs put DataFlex on opposite parities (:data:`PARITY_ORDER`), so whatever makes odd steps slower or
    faster than even ones by a factor ``p`` reads as ``cost * p`` in one run and ``cost / p`` in the other and
    cancels here; one median over the pairs of both runs lands anywhere between the two runs' clusters.
    """
    medians = run_medians(runs)
    if not medians:
        raise ValueError("balanced_ratio needs at least one run with a pair of steps")
    return statistics.geometric_mean(medians)


def run_fit(*, quick: bool, unjudged: str | None = None, progress=print, line: str = "v1") -> list[Result]:
    steps = 4 if quick else STEPS
    case, name = LINES[line]
    shape = f"8 prompts x 4 samples, responses <= 8 tokens, {steps} steps per run, DataFlex on odd / even steps"
    reason = fit_missing()
    if reason:
        progress(f"  SKIP {case}: {reason}")
        return [Result(case, name, shape, status="skip", target=FIT_TARGET, note=reason)]
    return [_run_alternating(case, name, shape, steps, unjudged, progress, line)]


def _run_alternating(case: str, name: str, shape: str, steps: int, unjudged: str | None, progress, line: str) -> Result:
    """Two runs of the line's DataFlex trainer, DataFlex on the odd steps of one and the even steps of the other."""
    from dataflex_lab.verl.cpu_loop import runner
    from dataflex_lab.verl.cpu_loop.alternate import ON_METRIC

    trainer = {"trainer_mode": "dataflex_sync"} if line == "v1" else {"trainer_mode": "sync", "use_v1": False}

    def spec(i: int, parity: str):
        return runner.RunSpec(
            **trainer, dataflex=PAIR, steps=steps, lr=0.0, dataflex_on_steps=parity,
            experiment=f"bench_{line}_{i}_{parity}",
        )  # fmt: skip

    def summary(done: list[dict[str, Any]]) -> str:
        on = [m["timing_s/step"] for m in done if m.get(ON_METRIC) == 1.0]
        off = [m["timing_s/step"] for m in done if m.get(ON_METRIC) == 0.0]
        return f"median step {statistics.median(on):.3f} s with DataFlex, {statistics.median(off):.3f} s without"

    runs: list[list[tuple[float, float]]] = []
    done: list[dict[str, Any]] = []
    for records in run_arms(PARITY_ORDER, spec, case, progress, summary=summary).values():
        runs.append(paired_ratios(records, ON_METRIC))
        done += after_warmup(records)
    pairs = [pair for run in runs for pair in run]
    on = [m for m in done if m.get(ON_METRIC) == 1.0]
    off = [m for m in done if m.get(ON_METRIC) == 0.0]
    hooks = [m["dataflex/hook_time_s"] for m in on if "dataflex/hook_time_s" in m]
    base = statistics.median(m["timing_s/step"] for m in off)
    hook = statistics.median(hooks) if hooks else None
    return measured(
        case,
        name,
        shape,
        median_s=statistics.median(m["timing_s/step"] for m in on),
        baseline_s=base,
        ratio=balanced_ratio(runs),
        target=FIT_TARGET,
        reps=len(pairs),
        unjudged=unjudged,
        note=(
            f"{len(pairs)} paired ratios: verl's timing_s/step of a step with DataFlex / its neighbour without, in "
            "the same run; the geometric mean of the two runs' medians (DataFlex on odd / even steps: a parity "
            "effect cancels; medians over the steps shown); lr 0, so every step does the same work but for "
            "DataFlex's; pair advantage_magnitude -> softmax"
        ),
        extra={
            "hook_median_s": hook,
            "hook_share": None if hook is None else hook / base,
            "pooled_ratio": statistics.median(m["timing_s/step"] for m in on) / base,
            "run_ratios": run_medians(runs),
            "pairs_median_ratio": statistics.median(a / b for a, b in pairs),
            "adv_median_s": {
                "with_dataflex": statistics.median(m["timing_s/adv"] for m in on),
                "without": statistics.median(m["timing_s/adv"] for m in off),
            },
        },
    )
