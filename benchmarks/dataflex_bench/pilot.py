"""Case ``pilot``: the staged-generation seam's own cost on the controller, generation and the workers left out
(issue 37), two informational rows.

The judged figure of issue 37's target, the seam's cost over verl's training step without generation (the workers'
log-prob and actor-update calls included), is case ``fit-pilot`` (:mod:`.fit_pilot`), in verl's own legacy fit loop.
The rows here keep the controller-side work alone, pre-built rows and no model, so the seam's bookkeeping can be
profiled at production shapes (512 prompts x 8 x 1024 tokens) that the CPU harness cannot train: they are
``info``, not judged, because their denominators leave out the workers' calls every real step makes, which is most
of a step (on the harness, the seam's few ms against hundreds of ms of the step without generation).

One step of ``mechanism: pilot`` as verl's legacy host runs it (``stages.next()`` / ``observe()`` per stage,
then the top-up assembly of ``stages.trained()`` by :func:`dataflex_verl.legacy_stages.trained_groups`, the
host's own code), timed two ways, alternated in one process on the same final batch:

- ``staged step vs reweight step``: the seam and ``session.run``, against ``session.run`` of the default
  mechanism (reweight: the same scorer, a softmax reweighter). In it: the seam's bookkeeping, the admission and
  the assembly; not in it: what a step pays with or without stages.
- ``staged host step vs host step``: both sides run what verl's legacy ``fit`` does on the controller after
  generation (``repeat`` of the prompt batch, ``union`` with the rollouts, ``extract_reward``, verl's GRPO
  ``compute_advantage``) and DataFlex's step as the legacy host runs it at ``compute_advantage`` (``read_batch``,
  ``adapter.step_outputs``, ``write_fields``); the staged side adds the seam before it. Not in it: verl's
  ``_balance_batch`` reorder (a copy of the batch both sides would pay) and the workers' calls (log-probs, the
  actor update), whose forward and backward of a real LLM this bench does not run.

Generation is excluded from both (a stage's rows are slices of pre-built rows, wrapped in a ``DataProto``
without a copy). Each phase's median is in the rows' ``extra``.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

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


class Replicas:
    """verl's rollout manager's place (generation excluded): each request row gets the next pre-built row, its
    tensors sliced, no copy. With the reward loop streaming ``rm_scores`` verl's agent loop echoes no prompt
    column, so the rows carry none (fit's ``union`` adds them)."""

    def __init__(self, rows: Rows) -> None:
        self.rows = rows

    def generate_sequences(self, requests):
        from verl import DataProto

        k, rows = len(requests), self.rows
        tensors = {"response_mask": rows.mask[:k], "rm_scores": rows.scores[:k], "old_log_probs": rows.log_probs[:k]}
        return DataProto.from_dict(tensors, meta_info={"timing": {"generate_sequences": 0.0}})


def dataset(size: int) -> list[dict]:
    """Prompt rows as verl's ``RLHFDataset.__getitem__`` returns them, already tokenized (a real dataset applies
    the chat template per row when the stages collate a screened prompt: not in this bench)."""
    return [
        {
            "dummy_tensor": torch.zeros(1, dtype=torch.uint8),
            "raw_prompt": [{"role": "user", "content": f"question {i}"}],
            "data_source": "bench",
            "reward_model": {"ground_truth": str(i), "style": "rule"},
            "extra_info": {"index": i},
            "index": i,
            "tools_kwargs": {},
            "interaction_kwargs": {},
        }
        for i in range(size)
    ]


class FitController:
    """What verl's legacy ``RayPPOTrainer.fit`` does on the controller with a pulled prompt batch, from the pull to
    the workers' calls, generation replaced by :class:`Replicas`; with a pilot session, through the host's staged
    generation (:class:`dataflex_verl.legacy_stages.PilotStagesRounds`, its own code: the stages, the prompt table,
    ``roll_out`` per stage, the one-copy assembly)."""

    def __init__(self, session, rows: Rows, prompts: int, n: int, staged: bool) -> None:
        from omegaconf import OmegaConf
        from verl.utils.dataset.rl_dataset import collate_fn

        from dataflex_core.session import StagedGeneration
        from dataflex_verl.legacy_rounds import RoundsRollout
        from dataflex_verl.legacy_stages import PilotStagesRounds

        self.session, self.n, self.step = session, n, 0
        self.generation = None  # the last step's stages (``None`` without the seam)
        self.dataset = dataset(prompts * 64)
        self.collate = collate_fn
        self.trainer = SimpleNamespace(
            dataflex=session,
            global_steps=0,
            config=OmegaConf.create({"actor_rollout_ref": {"rollout": {"n": n, "temperature": 1.0}}}),
            train_dataloader=SimpleNamespace(collate_fn=collate_fn),
            train_dataset=self.dataset,
            _get_gen_batch=self.gen_batch,
            dataflex_field_hints={},
            dataflex_metrics={},
            dataflex_generation=None,
        )
        self.rollout = RoundsRollout(Replicas(rows))
        self.rounds = PilotStagesRounds(self.trainer, self.rollout, session.seam(StagedGeneration)) if staged else None
        self.pulled = collate_fn(self.dataset[:prompts])

    def gen_batch(self, batch):
        """verl's ``_get_gen_batch``, the dataset columns DataFlex reads kept (``DataFlexLegacyMixin``'s)."""
        from verl.trainer.ppo.ray_trainer import RayPPOTrainer

        from dataflex_verl import dataproto_io

        gen_batch = RayPPOTrainer._get_gen_batch(self.trainer, batch)
        dataproto_io.keep_columns(batch, gen_batch, self.session.dataset_columns())
        return gen_batch

    def __call__(self):
        from verl import DataProto

        self.step += 1
        self.trainer.global_steps = self.step
        chosen = self.pulled if self.rounds is None else self.rounds.step(self.pulled)  # the loader's yield
        batch = DataProto.from_single_dict(chosen)
        batch.non_tensor_batch["uid"] = np.array([f"fit-{i:08d}" for i in range(len(batch))], dtype=object)
        gen_batch = self.gen_batch(batch)
        gen_batch.meta_info["global_steps"] = self.step
        rollouts = self.rollout.generate_sequences(gen_batch.repeat(repeat_times=self.n, interleave=True))
        rollouts.meta_info.pop("timing", None)
        self.generation, self.trainer.dataflex_generation = self.trainer.dataflex_generation, None
        return host_step(self.session, batch, rollouts, self.n, self.step, generation=self.generation)


def host_step(session, prompts, rollouts, n: int, step: int, generation=None):
    """What verl's legacy ``fit`` does on the controller between generation and the workers' calls, with DataFlex's
    step at ``compute_advantage`` as :class:`dataflex_verl.legacy.DataFlexLegacyMixin` runs it."""
    from verl.trainer.ppo import ray_trainer
    from verl.trainer.ppo.reward import extract_reward

    from dataflex_verl import adapter, dataproto_io

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
    from dataflex_verl.legacy_stages import SEAM_TIME, trained_groups

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
    staged_fit = FitController(pilot_host, rows, prompts, n, staged=True)
    plain_fit = FitController(base_host, rows, prompts, n, staged=False)
    step = {"pilot": 0, "base": 0}
    final = {}
    phases: dict[str, list[float]] = {"stages": [], "assembly": [], "run": []}
    seam_spent: list[float] = []

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
        running = time.perf_counter()
        result = pilot.run(batch, step["pilot"], generation=stages)
        for name, took in zip(phases, (*spent, time.perf_counter() - running)):
            phases[name].append(took)
        return result

    def pilot_host_step():
        out = staged_fit()
        seam_spent.append(staged_fit.trainer.dataflex_metrics.pop(SEAM_TIME))  # the stages less their "generation"
        return out

    pilot_step()  # the final batch the baselines step on
    batch = final["batch"]

    def base_step():
        step["base"] += 1
        return base.run(batch, step["base"])

    steps = {"pilot": pilot_step, "base": base_step, "pilot_host": pilot_host_step, "base_host": plain_fit}
    timings = measure_interleaved(steps, reps=reps)
    p, b = timings.median("pilot"), timings.median("base")
    ph, bh = timings.median("pilot_host"), timings.median("base_host")

    def medians(spent: dict[str, list[float]]) -> dict[str, float]:
        return {f"{name}_ms": float(np.median(took[1:] or took)) * 1e3 for name, took in spent.items()}

    common = {"target": TARGET, "reps": reps, "unjudged": unjudged or "info"}  # judged: case fit-pilot
    return [
        measured(
            "pilot",
            "staged step vs reweight step",
            shape,
            median_s=p,
            baseline_s=b,
            ratio=p / b,
            note=(
                "info, not judged (case fit-pilot is): the seam and DataFlex's step against the reweight step on the "
                "final batch, pre-built rows; no generation, no verl step, no workers' calls in either side"
            ),
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
                "info, not judged (case fit-pilot is): verl's legacy fit on the controller from the pulled batch to "
                "the workers (uids, gen batch, repeat, union, extract_reward, GRPO compute_advantage, DataFlex's "
                "step), staged through the seam; leaves out the workers' log-prob and actor calls of a real step"
            ),
            extra={
                "trained_rows": len(batch),
                "seam_ms": float(np.median(seam_spent[1:] or seam_spent)) * 1e3,
                "fit_without_seam_ms": bh * 1e3,
            },
            **common,
        ),
    ]
