"""Case ``host``: verl's V1 advantage step with DataFlex's, ``dataflex_sync._compute_advantage`` over
``sync._compute_advantage``, on one queued GRPO batch in a local Ray + TransferQueue — target <= 1.3.

Uses ``dataflex_lab.verl.sandbox`` (the host's own harness for its tests and demo) to compose verl's real config,
start the queue and write the rollout. Both trainers run ``_compute_advantage`` on the same keys, alternately: each
call recomputes and overwrites ``advantages`` (and, for DataFlex, ``rollout_is_weights``), so every call does the
same work on the same data. One call's time is bimodal here (a fast cluster and a slow tail while TransferQueue's
storage actor shares the cores): the ratio is of trimmed means (:meth:`~.timing.Timings.trimmed_ratio`).
"""

from __future__ import annotations

import importlib.util
import logging
import statistics

from .results import Result, measured, skipped
from .timing import measure_interleaved

HOST_TARGET = 1.3
#: The share of each side's calls left out at each end before the means (2 of 21 in full mode).
TRIM = 0.1
#: The user guide's example block: the pair a first-time user runs.
HOST_BLOCK = {
    "scorer": {"name": "advantage_magnitude"},
    "actuator": {"name": "softmax", "params": {"temperature": 1.0}},
}
NAME = "dataflex_sync / sync _compute_advantage"


def host_missing() -> str | None:
    """Why the host case cannot run here, or None."""
    for module, dist in (("dataflex_verl", "dataflex-verl"), ("verl", "verl"), ("transfer_queue", "transferqueue")):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install {dist}); host overhead not measured"
    return None


def run_host(
    *, bs: int, length: int, group_size: int, reps: int, unjudged: str | None = None, progress=print
) -> list[Result]:
    shape = f"bs={bs} ({bs // group_size}x{group_size}) L={length}"
    reason = host_missing()
    if reason:
        progress(f"  SKIP host: {reason}")
        return [skipped("host", NAME, shape, reason, HOST_TARGET)]
    from verl.trainer.ppo.v1 import get_trainer_cls

    from dataflex_lab.verl import sandbox

    logging.getLogger("transfer_queue").setLevel(logging.ERROR)  # one warning per client about thread counts
    overrides = [f"actor_rollout_ref.rollout.n={group_size}", "algorithm.adv_estimator=grpo"]
    plain = get_trainer_cls("sync")(sandbox.compose_config(overrides))
    dataflex = get_trainer_cls("dataflex_sync")(sandbox.compose_config(overrides, dataflex=HOST_BLOCK))
    plain.global_steps = dataflex.global_steps = 1
    hook_s: list[float] = []

    def with_dataflex():
        metrics: dict = {}
        out = dataflex._compute_advantage(meta, metrics)
        hook_s.append(metrics.get("dataflex/hook_time_s", float("nan")))
        return out

    with sandbox.local_queue(progress=lambda m: progress(f"  {m}")):
        progress(f"  queueing a synthetic GRPO rollout, {shape} ...")
        rollout = sandbox.synthetic_rollout(bs // group_size, group_size, max_response_len=length, seed=0)
        meta = sandbox.put_rollout(rollout)
        if "rollout_is_weights" not in (with_dataflex().fields or ()):
            raise RuntimeError("dataflex_sync._compute_advantage did not return rollout_is_weights in its meta")
        progress(f"  timing {reps} rounds of sync / dataflex_sync _compute_advantage ...")
        timings = measure_interleaved(
            {"sync": lambda: plain._compute_advantage(meta, {}), "dataflex_sync": with_dataflex}, reps=reps
        )
        sandbox.clear(meta)
    hook = statistics.median(hook_s[-reps:])
    return [
        measured(
            "host",
            NAME,
            shape,
            median_s=timings.median("dataflex_sync"),
            baseline_s=timings.median("sync"),
            ratio=timings.trimmed_ratio("dataflex_sync", "sync", TRIM),
            target=HOST_TARGET,
            reps=reps,
            unjudged=unjudged,
            note=f"advantage_magnitude+softmax; DataFlex's hook took {hook * 1e3:.0f} ms of "
            f"{timings.median('dataflex_sync') * 1e3:.0f} ms; ratio of trimmed means ({TRIM:.0%} off each end)",
            extra={"hook_s": hook, "samples_s": timings.samples},
        )  # fmt: skip
    ]
