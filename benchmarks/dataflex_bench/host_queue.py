"""The host case proper: both trainers on one queued GRPO batch in a local Ray + TransferQueue.

Reuses ``dataflex_lab.verl.sandbox`` (the host's own harness for its tests and
demo) to compose verl's real config, start the queue and write the rollout.
Both trainers run ``_compute_advantage`` on the same keys, alternately: each
call recomputes and overwrites ``advantages`` (and, for DataFlex,
``rollout_is_weights``), so every call does the same work on the same data.
"""

from __future__ import annotations

import logging
import statistics

from .results import Result, measured
from .timing import measure_interleaved

#: The share of each side's calls left out at each end before the means are taken (2 of 21 in full mode).
#: One call's time spreads from a fast cluster (620-830 ms) to a slow tail (1.0-1.4 s) here (TransferQueue's
#: storage actor shares the cores). The ratio of medians jumped between them (1.03-1.36 over 15 full
#: runs of the same code, r15 of 2026-12-05: 13 of 21 DataFlex calls slow, 7 of 21 without: 1.36), the ratio of
#: trimmed means read 1.08-1.18 over the same samples: what DataFlex costs a run, landing in the slow cluster
#: more often included.
TRIM = 0.1

#: The user guide's example block: the pair a first-time user runs.
HOST_BLOCK = {
    "mechanism": "reweight",
    "scorer": {"name": "advantage_magnitude"},
    "actuator": {"name": "softmax", "params": {"temperature": 1.0}},
}


def _missing_components() -> str | None:
    import dataflex_core

    registry = dataflex_core.get_registry()
    wanted = [("scorer", HOST_BLOCK["scorer"]["name"]), ("reweighter", HOST_BLOCK["actuator"]["name"])]
    missing = [f"{kind} {name!r}" for kind, name in wanted if registry.get(kind, name) is None]
    if missing:
        return f"{' and '.join(missing)} not installed (the host case runs the user guide's pair)"
    return None


def run(*, name, shape, bs, length, group_size, reps, warmup, target, unjudged=None, progress=print) -> list[Result]:
    reason = _missing_components()
    if reason:
        progress(f"  SKIP host overhead: {reason}")
        return [Result("host", name, shape, status="skip", target=target, note=reason)]

    from verl.trainer.ppo.v1 import get_trainer_cls

    # TransferQueue warns once per client about thread counts on small machines; keep the progress readable.
    logging.getLogger("transfer_queue").setLevel(logging.ERROR)

    from dataflex_lab.verl import sandbox

    overrides = [f"actor_rollout_ref.rollout.n={group_size}", "algorithm.adv_estimator=grpo"]
    plain = get_trainer_cls("sync")(sandbox.compose_config(overrides))
    dataflex = get_trainer_cls("dataflex_sync")(sandbox.compose_config(overrides, dataflex=HOST_BLOCK))
    for trainer in (plain, dataflex):
        trainer.global_steps = 1
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
        out = with_dataflex()
        if "rollout_is_weights" not in (out.fields or ()):
            raise RuntimeError("dataflex_sync._compute_advantage did not return rollout_is_weights in its meta")
        progress(f"  timing {warmup} warm-up + {reps} rounds of sync / dataflex_sync _compute_advantage ...")
        timings = measure_interleaved(
            {"sync": lambda: plain._compute_advantage(meta, {}), "dataflex_sync": with_dataflex},
            reps=reps,
            warmup=warmup,
        )
        sandbox.clear(meta)
    hook = statistics.median(hook_s[-reps:])
    note = (
        f"{HOST_BLOCK['scorer']['name']}+{HOST_BLOCK['actuator']['name']}; the DataFlex hook "
        f"(batch from verl's read, score, act, weights into verl's write) took {hook * 1e3:.0f} ms of "
        f"{timings.median('dataflex_sync') * 1e3:.0f} ms; ratio of trimmed means ({TRIM:.0%} off each end)"
    )
    return [
        measured(
            "host",
            name,
            shape,
            median_s=timings.median("dataflex_sync"),
            baseline_s=timings.median("sync"),
            ratio=timings.trimmed_ratio("dataflex_sync", "sync", TRIM),
            target=target,
            reps=reps,
            unjudged=unjudged,
            note=note,
            extra={
                "hook_s": hook,
                "block": HOST_BLOCK,
                "samples_s": timings.samples,
                "trimmed_mean_s": {k: timings.trimmed_mean(k, TRIM) for k in ("sync", "dataflex_sync")},
                "ratio_of_medians": timings.ratio("dataflex_sync", "sync"),
                "paired_ratio": timings.paired_ratio("dataflex_sync", "sync"),
            },
        )
    ]
