"""Case ``pilot``: the staged-generation seam's own cost per step (issue 37), generation excluded.

One step of ``mechanism: pilot`` as verl's legacy host runs it (``stages.next()`` / ``observe()`` per stage,
then the top-up assembly of ``stages.trained()`` by :func:`dataflex_verl.legacy_stages.trained_groups`, the
host's own code: each stage's trained rows selected from its ``DataProto``, concatenated, laid out group by
group), then ``session.run``, against ``session.run`` of the default mechanism (reweight: the same scorer, a
softmax reweighter) on the same final batch, alternated in one process. In the ratio: the seam's bookkeeping,
the admission and the assembly. Not in it: generation (a stage's rows are slices of pre-built rows, wrapped in
a ``DataProto`` without a copy) and the host's advantages and batch reading, which a step pays with or
without stages. Each phase's median is in the row's ``extra``. Target: ratio <= 1.05.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from .results import Result, measured
from .timing import measure_interleaved

TARGET = 1.05
SELECT = {
    "scorer": {"name": "group_reward_variance"},
    "actuator": {"name": "threshold_band", "params": {"low": 0.01, "high": 1.0e9}},
}


def _capabilities():
    from dataflex_core.session import (
        SEQUENCE_UNIT,
        TOKEN_UNIT,
        FieldSupport,
        GenerationRounds,
        HostCapabilities,
        LossWeights,
        PromptCounts,
        SeamSupport,
        StagedGeneration,
        TrainSampler,
    )

    fields = ("response_mask", "advantages", "rm_scores", "token_level_scores", "old_log_probs", "uid")
    return TOKEN_UNIT, HostCapabilities(
        name="bench host (pre-built rows)",
        seams={
            LossWeights: SeamSupport(True),
            TrainSampler: SeamSupport(False, "the bench draws no prompts"),
            GenerationRounds: SeamSupport(False, "the bench generates nothing"),
            PromptCounts: SeamSupport(False, "the bench generates nothing"),
            StagedGeneration: SeamSupport(True),
        },
        loss_units=(TOKEN_UNIT, SEQUENCE_UNIT),
        token_weights=True,
        complete_groups=True,
        fields={name: FieldSupport(True) for name in fields},
        dataset_columns=False,
    )


def _session(block: dict):
    from dataflex_core.session import DataFlexSession

    unit, caps = _capabilities()
    session = DataFlexSession(block)
    session.mount(
        caps,
        loss_unit=unit,
        ctx={"loss_agg": "token-mean", "adv_estimator": "grpo"},
        adv_estimator="grpo",
        is_group_estimator=lambda name: True,
    )
    return session


class Rows:
    """Pre-built rollouts: ``take(uids, counts)`` is a stage's rows, sliced (no generation)."""

    def __init__(self, rows: int, length: int, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.reward = torch.randint(0, 2, (rows,), generator=g).float()
        lengths = torch.randint(length // 4, length + 1, (rows,), generator=g)
        self.mask = (torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.int64)
        scores = torch.zeros(rows, length)
        scores[torch.arange(rows), lengths - 1] = self.reward
        self.scores = scores
        self.advantages = (self.reward - 0.5).unsqueeze(-1) * self.mask
        self.log_probs = -torch.rand(rows, length, generator=g) * self.mask

    def take(self, uids: np.ndarray | torch.Tensor, counts: torch.Tensor):
        """A stage's rows as verl hands them (a ``DataProto``, no copy) and each row's uid."""
        from verl import DataProto

        counts = torch.as_tensor(counts)
        n = int(counts.sum())
        uid = torch.as_tensor(uids).repeat_interleave(counts)
        tensors = {
            "response_mask": self.mask[:n],
            "advantages": self.advantages[:n],
            "rm_scores": self.scores[:n],
            "token_level_scores": self.scores[:n],
            "old_log_probs": self.log_probs[:n],
            "is_padding": torch.zeros(n, dtype=torch.bool),
        }
        return DataProto.from_dict(tensors, {"uid": uid.numpy().copy()}), uid  # an array of its own, as verl has


def as_batch(data):
    """The step's view of a ``DataProto`` (its tensors, not copied)."""
    from dataflex_core import Batch

    return Batch(dict(data.batch.items()), {"uid": np.asarray(data.non_tensor_batch["uid"], dtype=np.int64)})


def run_pilot(*, quick: bool, reps: int, unjudged: str | None = None, progress=print) -> list[Result]:
    from dataflex_core.session import StagedGeneration
    from dataflex_verl.legacy_stages import trained_groups

    prompts, n, length = (16, 4, 64) if quick else (512, 8, 1024)
    shape = f"{prompts} prompts x {n} rollouts x {length} tokens"
    progress(f"  pilot: {shape}")
    pilot = _session({**SELECT, "mechanism": "pilot", "pilot": {"prompts": 2, "rollouts": 2, "on_short": "backfill"}})
    base = _session({"scorer": SELECT["scorer"], "actuator": {"name": "softmax"}})
    staged = pilot.seam(StagedGeneration)
    staged.prepare(prompts * 64, batch_size=prompts, seed=0)
    rows = Rows(prompts * n * 4, length)
    step = {"pilot": 0, "base": 0}
    final = {}
    phases: dict[str, list[float]] = {"stages": [], "assembly": [], "run": []}

    def pilot_step():
        step["pilot"] += 1
        began = time.perf_counter()
        stages = staged.stages(prompts, rollout_n=n)
        parts = []
        while (asked := stages.next()) is not None:
            data, uid = rows.take(asked.uids, asked.counts)
            staged.observe(stages, as_batch(data), step["pilot"])
            parts.append((data, uid))
        assembling = time.perf_counter()
        out, _ = trained_groups(parts, stages.trained(), n)
        batch = final["batch"] = as_batch(out)
        running = time.perf_counter()
        result = pilot.run(batch, step["pilot"], generation=stages)
        done = time.perf_counter()
        for name, spent in zip(phases, (assembling - began, running - assembling, done - running)):
            phases[name].append(spent)
        return result

    pilot_step()  # the final batch the baseline steps on
    batch = final["batch"]

    def base_step():
        step["base"] += 1
        return base.run(batch, step["base"])

    timings = measure_interleaved({"pilot": pilot_step, "base": base_step}, reps=reps)
    p, b = timings.median("pilot"), timings.median("base")
    return [
        measured(
            "pilot",
            "staged step vs reweight step",
            shape,
            median_s=p,
            baseline_s=b,
            ratio=p / b,
            target=TARGET,
            reps=reps,
            unjudged=unjudged,
            note="generation excluded (pre-built rows); top-up assembly: verl's legacy trained_groups",
            extra={
                "trained_rows": len(batch),
                **{f"{name}_ms": float(np.median(spent[1:] or spent)) * 1e3 for name, spent in phases.items()},
            },
        )
    ]
