"""Case ``fit``: verl's own GRPO step with DataFlex over the same step without it.

Runs ``python -m verl.trainer.main_ppo`` on the CPU harness
(:mod:`dataflex_lab.verl.cpu_loop`) for the ``sync`` and ``dataflex_sync``
trainers (case ``fit-legacy``: verl's legacy ``RayPPOTrainer`` without and with
the ``dataflex:`` block, ``trainer.use_v1=false``) in the order sync, dataflex, dataflex, sync, so drift in a shared
machine's load falls on both alike. The learning rate is 0: the policy never
moves, generation is keyed per (step, prompt, sample), so both trainers roll
out the same responses at every step and do the same work but for DataFlex's.
The ratio is the median of ``timing_s/step`` with DataFlex over the median
without, the first step of each run (verl's warm-up) left out. The pair is
the default one (``advantage_magnitude`` -> ``softmax``).

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
#: Arms in the order they run (ABBA).
ORDER = ("sync", "dataflex_sync", "dataflex_sync", "sync")


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


#: The case name and the arms' trainer per verl trainer line: V1 trainer modes, or ``RayPPOTrainer`` with and
#: without the ``dataflex:`` block (``fit-legacy``, ``trainer.use_v1=false``).
LINES = {
    "v1": ("fit", "dataflex_sync / sync step in verl's fit loop"),
    "legacy": ("fit-legacy", "RayPPOTrainer with / without dataflex, step in verl's legacy fit loop"),
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
    ``spec_of(i, arm)`` the i-th run's :class:`~dataflex_lab.verl.cpu_loop.runner.RunSpec`; ``summary`` of an arm's
    steps so far goes to ``progress`` after each run.

    :returns: per arm, the metrics of its runs' steps after the warm-up step, run after run.
    """
    from dataflex_lab.verl.cpu_loop import runner

    runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in order}
    with tempfile.TemporaryDirectory() as tmp:
        workspace = runner.prepare_workspace(Path(tmp) / "workspace")
        for i, arm in enumerate(order):
            records = runner.run_entry_point(
                spec_of(i, arm), workspace, Path(tmp) / f"{i}_{arm}.jsonl", log_file=Path(tmp) / f"{i}_{arm}.log"
            )
            runs[arm] += after_warmup(records)
            said = f": {summary(runs[arm])}" if summary is not None and runs[arm] else ""
            progress(f"  {case} run {i + 1}/{len(order)} ({arm}){said}")
    return runs


def run_fit(*, quick: bool, unjudged: str | None = None, progress=print, line: str = "v1") -> list[Result]:
    steps = 3 if quick else 12
    case, name = LINES[line]
    order = "/".join(ORDER) if line == "v1" else "without/with/with/without dataflex"
    shape = f"8 prompts x 4 samples, responses <= 8 tokens, {steps} steps per run, runs {order}"
    reason = fit_missing()
    if reason:
        progress(f"  SKIP {case}: {reason}")
        return [Result(case, name, shape, status="skip", target=FIT_TARGET, note=reason)]
    from dataflex_lab.verl.cpu_loop import runner

    def spec(i: int, arm: str):
        return runner.RunSpec(
            trainer_mode=arm if line == "v1" else "sync",
            use_v1=line == "v1",
            dataflex=PAIR if arm != "sync" else None,
            steps=steps,
            lr=0.0,
            experiment=f"bench_{line}_{i}_{arm}",
        )

    def step_time(done: list[dict[str, Any]]) -> str:
        return f"median step {statistics.median(m['timing_s/step'] for m in done):.3f} s"

    runs = run_arms(ORDER, spec, case, progress, summary=step_time)
    times = {arm: [m["timing_s/step"] for m in done] for arm, done in runs.items()}
    advantage = {arm: [m["timing_s/adv"] for m in done] for arm, done in runs.items()}
    hooks = [m["dataflex/hook_time_s"] for m in runs["dataflex_sync"] if "dataflex/hook_time_s" in m]
    base, with_dataflex = statistics.median(times["sync"]), statistics.median(times["dataflex_sync"])
    hook = statistics.median(hooks) if hooks else None
    return [
        measured(
            case,
            name,
            shape,
            median_s=with_dataflex,
            baseline_s=base,
            ratio=with_dataflex / base,
            target=FIT_TARGET,
            reps=len(times["dataflex_sync"]),
            unjudged=unjudged,
            note="verl's timing_s/step, lr 0 so both arms roll out the same responses; pair advantage_magnitude -> softmax",
            extra={
                "hook_median_s": hook,
                "hook_share": None if hook is None else hook / base,
                "adv_median_s": {arm: statistics.median(v) for arm, v in advantage.items()},
            },
        )
    ]
