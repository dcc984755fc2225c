"""Case ``pilot``: the staged-generation seam's own cost per step (issue 37), generation excluded.

One step of ``mechanism: pilot`` as verl's legacy host runs it (``stages.next()`` / ``observe()`` per stage,
then the top-up assembly of ``stages.trained()`` by :func:`dataflex_verl.legacy_stages.trained_groups`, the
host's own code), timed two ways, alternated in one process on the same final batch:

- ``staged step vs reweight step``: the seam and ``session.run``, against ``session.run`` of the default
  mechanism (reweight: the same scorer, a softmax reweighter). In it: the seam's bookkeeping, the admission and
  the assembly; not in it: what a step pays with or without stages.
- ``staged host step vs host step``: the issue's "step without it": both sides run what verl's legacy ``fit``
  does on the controller after generation (``repeat`` of the prompt batch, ``union`` with the rollouts,
  ``extract_reward``, verl's GRPO ``compute_advantage``) and DataFlex's step as the legacy host runs it at
  ``compute_advantage`` (``read_batch``, ``adapter.step_outputs``, ``write_fields``); the staged side adds the
  seam before it. Not in it: verl's ``_balance_batch`` reorder (a copy of the batch both sides would pay) and the
  workers' calls (log-probs, the actor update), whose forward and backward of a real LLM this bench does not run.

Generation is excluded from both (a stage's rows are slices of pre-built rows, wrapped in a ``DataProto``
without a copy). Each phase's median is in the rows' ``extra``. Target: ratio <= 1.05.
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


def prompt_batch(prompts: int):
    """fit's pulled prompt batch after ``_get_gen_batch``, as verl's ``RLHFDataset`` collates it: ``dummy_tensor``
    and the columns fit keeps for the reward (``index`` too: DataFlex keeps the dataset columns it reads)."""
    from verl import DataProto

    def column(values):
        out = np.empty(prompts, dtype=object)
        out[:] = values
        return out

    return DataProto.from_dict(
        {"dummy_tensor": torch.zeros(prompts, 1, dtype=torch.uint8)},
        {
            "data_source": column(["bench"] * prompts),
            "reward_model": column([{"ground_truth": str(i), "style": "rule"} for i in range(prompts)]),
            "extra_info": column([{"index": i} for i in range(prompts)]),
            "index": column(list(range(prompts))),
            "uid": column([f"fit-{i:08d}" for i in range(prompts)]),  # fit's uuid4 strings' place
        },
    )


def host_step(session, prompts, rollouts, n: int, step: int, generation=None):
    """What verl's legacy ``fit`` does on the controller between generation and the workers' calls, with DataFlex's
    step at ``compute_advantage`` as :class:`dataflex_verl.legacy.DataFlexLegacyMixin` runs it."""
    from dataflex_verl import adapter, dataproto_io
    from verl.trainer.ppo import ray_trainer
    from verl.trainer.ppo.reward import extract_reward

    rollouts.non_tensor_batch["uid"] = np.repeat(prompts.non_tensor_batch["uid"], n)  # RoundsRollout's / fit's uids
    batch = prompts.repeat(repeat_times=n, interleave=True)
    batch = batch.union(rollouts)
    reward, _ = extract_reward(batch)
    batch.batch["token_level_scores"] = reward
    batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]

    def estimate(data):
        return ray_trainer.compute_advantage(data, adv_estimator=ray_trainer.AdvantageEstimator.GRPO, num_repeat=n)

    batch = estimate(batch)
    start = time.perf_counter()
    fields, compose = adapter.step_fields(session, verl_weights=False)
    read = dataproto_io.read_batch(batch, list(dict.fromkeys([*fields, "advantages"])))
    out = adapter.step_outputs(
        session, read, fields, compose=compose, is_padding=dataproto_io.padding_rows(batch), step=step, start=start,
        recompute=lambda kept: dataproto_io.recompute_advantages(batch, kept, estimate), metrics={},
        generation=generation,
    )  # fmt: skip
    if out:
        dataproto_io.write_fields(batch, out)
    return batch


def run_pilot(*, quick: bool, reps: int, unjudged: str | None = None, progress=print) -> list[Result]:
    from dataflex_core.session import StagedGeneration
    from dataflex_verl.legacy_stages import trained_groups

    prompts, n, length = (16, 4, 64) if quick else (512, 8, 1024)
    shape = f"{prompts} prompts x {n} rollouts x {length} tokens"
    progress(f"  pilot: {shape}")
    block = {**SELECT, "mechanism": "pilot", "pilot": {"prompts": 2, "rollouts": 2, "on_short": "backfill"}}
    reweight = {"scorer": SELECT["scorer"], "actuator": {"name": "softmax"}}
    pilot, base = _session(block), _session(reweight)
    pilot_host, base_host = _session(block), _session(reweight)
    for session in (pilot, pilot_host):
        session.seam(StagedGeneration).prepare(prompts * 64, batch_size=prompts, seed=0)
    rows = Rows(prompts * n * 4, length)
    pulled = prompt_batch(prompts)
    step = {"pilot": 0, "base": 0, "pilot_host": 0, "base_host": 0}
    final = {}
    phases: dict[str, list[float]] = {"stages": [], "assembly": [], "run": []}
    host_phases: dict[str, list[float]] = {"stages": [], "assembly": [], "host_step": []}

    def stages_and_assembly(session, at: int):
        staged = session.seam(StagedGeneration)
        began = time.perf_counter()
        stages = staged.stages(prompts, rollout_n=n)
        parts = []
        while (asked := stages.next()) is not None:
            data, uid = rows.take(asked.uids, asked.counts)
            staged.observe(stages, as_batch(data), at)
            parts.append((data, uid))
        assembling = time.perf_counter()
        out, _ = trained_groups(parts, stages.trained(), n)
        return stages, out, (assembling - began, time.perf_counter() - assembling)

    def pilot_step():
        step["pilot"] += 1
        stages, out, spent = stages_and_assembly(pilot, step["pilot"])
        batch = final["batch"] = as_batch(out)
        final["rollouts"] = out
        running = time.perf_counter()
        result = pilot.run(batch, step["pilot"], generation=stages)
        for name, took in zip(phases, (*spent, time.perf_counter() - running)):
            phases[name].append(took)
        return result

    def pilot_host_step():
        step["pilot_host"] += 1
        stages, out, spent = stages_and_assembly(pilot_host, step["pilot_host"])
        hosting = time.perf_counter()
        result = host_step(pilot_host, pulled, out, n, step["pilot_host"], generation=stages)
        for name, took in zip(host_phases, (*spent, time.perf_counter() - hosting)):
            host_phases[name].append(took)
        return result

    pilot_step()  # the final batch the baselines step on
    batch, plain = final["batch"], final["rollouts"]  # the same rows as a step without stages gets them

    def base_step():
        step["base"] += 1
        return base.run(batch, step["base"])

    def base_host_step():
        step["base_host"] += 1
        return host_step(base_host, pulled, plain, n, step["base_host"])

    steps = {"pilot": pilot_step, "base": base_step, "pilot_host": pilot_host_step, "base_host": base_host_step}
    timings = measure_interleaved(steps, reps=reps)
    p, b = timings.median("pilot"), timings.median("base")
    ph, bh = timings.median("pilot_host"), timings.median("base_host")

    def medians(spent: dict[str, list[float]]) -> dict[str, float]:
        return {f"{name}_ms": float(np.median(took[1:] or took)) * 1e3 for name, took in spent.items()}

    common = {"target": TARGET, "reps": reps, "unjudged": unjudged}
    return [
        measured(
            "pilot",
            "staged step vs reweight step",
            shape,
            median_s=p,
            baseline_s=b,
            ratio=p / b,
            note="generation excluded (pre-built rows); top-up assembly: verl's legacy trained_groups",
            extra={"trained_rows": len(batch), **medians(phases)},
            **common,
        ),
        measured(
            "pilot",
            "staged host step vs host step",
            shape,
            median_s=ph,
            baseline_s=bh,
            ratio=ph / bh,
            note=(
                "generation excluded; both: verl's legacy fit between generation and the workers (repeat, union, "
                "extract_reward, GRPO compute_advantage) + DataFlex's legacy step; staged adds the seam"
            ),
            extra={"trained_rows": len(batch), "host_step_base_ms": bh * 1e3, **medians(host_phases)},
            **common,
        ),
    ]
