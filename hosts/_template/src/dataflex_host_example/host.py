"""The host: DataFlex inside the toy loop, through core's session at the loop's seams.

Everything a host writes is here, and nothing of the lifecycle (plugin pinning, mounting, the mechanism,
the warm-up rule, component state, metrics: :class:`~dataflex_core.session.DataFlexSession` owns those):

- :func:`capabilities`: what this loop can do for DataFlex under its configuration;
- :func:`canonical_batch`: the loop's batch in the canonical fields (:mod:`dataflex_core.step.fields`);
- :class:`DataFlexToyTrainer`: the session created first in the constructor and mounted, its step run in
  the loop's ``loss_weights`` seam and applied to the loss, its state saved before the loop's checkpoint
  files and checked before the loop loads anything on resume.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from dataflex_core import Batch, ConfigError
from dataflex_core.session import (
    SEQUENCE_UNIT,
    TOKEN_UNIT,
    DataFlexSession,
    FieldSupport,
    GenerationRounds,
    HostCapabilities,
    LossWeights,
    PromptCounts,
    SeamSupport,
    StagedGeneration,
    StepStages,
    TrainSampler,
)

from .loop import ToyConfig, ToyTrainer
from .version import __version__

# --8<-- [start:capabilities]
#: ``loss_agg`` -> the unit the loop's loss averages over (DataFlex's weights have mean one in it).
LOSS_UNITS = {"token-mean": TOKEN_UNIT, "seq-mean-token-mean": SEQUENCE_UNIT}
#: Canonical fields the loop has, and what to do about the ones it lacks.
FIELDS = {
    "response_mask": FieldSupport(True),
    "advantages": FieldSupport(True),
    "rm_scores": FieldSupport(True),
    "token_level_scores": FieldSupport(True),
    "old_log_probs": FieldSupport(True),
    "uid": FieldSupport(True),
    "values": FieldSupport(False, "the toy loop has no critic; pick a scorer that does not read values"),
    "returns": FieldSupport(False, "the toy loop computes no returns; read advantages instead"),
    "entropy": FieldSupport(False, "the toy loop does not compute entropy; read old_log_probs instead"),
}


def capabilities(config: ToyConfig) -> HostCapabilities:
    """The loop multiplies per-token weights into its loss and can generate a step in stages; it cannot drop rows
    or choose its prompts otherwise."""
    return HostCapabilities(
        name=f"toy loop (dataflex-host-example {__version__})",
        # the seams this host provides, and why not the others (a mechanism that needs one is refused with it)
        seams={
            LossWeights: SeamSupport(True),
            TrainSampler: SeamSupport(False, "the toy loop walks its dataset in order"),
            GenerationRounds: SeamSupport(False, "the toy loop generates one batch per step"),
            PromptCounts: SeamSupport(False, "the toy loop rolls every prompt out the same number of times"),
            StagedGeneration: SeamSupport(True),
        },
        loss_units=(TOKEN_UNIT, SEQUENCE_UNIT),
        token_weights=True,
        complete_groups=True,
        fields=FIELDS,
        dataset_columns=True,  # other names are columns of the toy dataset, carried into each row
    )


# --8<-- [end:capabilities]


# --8<-- [start:batch]
def canonical_batch(
    batch: Mapping[str, torch.Tensor],
    log_probs: torch.Tensor,
    fields: list[str],
    dataset: Sequence[Mapping[str, Any]] = (),
) -> Batch:
    """The loop's batch as the step reads it: per-token tensors masked to the response, ``uid`` the group, and
    the dataset columns it reads (a ledger's ``prompt_key``) from each row's prompt.

    Only the fields the mounted pipeline reads are built; padding rows carry ``is_padding``.
    """
    mask = batch["mask"]
    rows = torch.arange(len(mask))
    last = (mask.sum(-1) - 1).clamp(min=0)
    reward = torch.zeros(mask.shape)
    reward[rows, last] = batch["reward"] * mask.any(-1)
    values = {
        "response_mask": mask.to(torch.int64),
        "advantages": batch["advantages"].unsqueeze(-1) * mask,
        "rm_scores": reward,
        "token_level_scores": reward,
        "old_log_probs": log_probs.detach() * mask,
    }
    tensors = {name: value for name, value in values.items() if name in fields or name == "response_mask"}
    tensors["is_padding"] = batch["is_padding"]
    objects = {"uid": np.asarray(batch["group"].tolist(), dtype=np.int64)} if "uid" in fields else {}
    prompts = batch["prompt"].tolist()
    for name in (n for n in fields if n not in FIELDS and dataset and n in dataset[0]):
        objects[name] = np.asarray([dataset[p][name] for p in prompts], dtype=object)
    return Batch(tensors, objects)


class ToyColumns:
    """The toy dataset as DataFlex reads a train dataset (:class:`~dataflex_core.session.TrainDataset`)."""

    def __init__(self, rows: Sequence[Mapping[str, Any]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def columns(self) -> list[str]:
        return list(self.rows[0]) if self.rows else []

    def column(self, name: str) -> list[Any]:
        return [row[name] for row in self.rows]


# --8<-- [end:batch]


def assemble(parts: list[dict[str, torch.Tensor]], keep: list[torch.Tensor], padding: int) -> dict[str, torch.Tensor]:
    """The trained batch of a staged step: each stage's kept rows, stage after stage, then ``padding`` rows."""
    rows = {name: torch.cat([part[name][index] for part, index in zip(parts, keep)]) for name in parts[0]}
    rows.pop("advantages", None)  # recomputed by the loop on the whole groups
    pad = {name: value[-padding:] if padding else value[:0] for name, value in parts[0].items() if name in rows}
    return {name: torch.cat([rows[name], pad[name]]) for name in rows}


# --8<-- [start:session]
class DataFlexToyTrainer(ToyTrainer):
    """The toy loop with a ``dataflex`` block: ``DataFlexToyTrainer(config, dataset, dataflex={...})``."""

    def __init__(self, config: ToyConfig, dataset: Any, *, dataflex: Any) -> None:
        # first: with plugins.lock only locked plugins are imported, and any drift stops the run here
        self.dataflex = DataFlexSession(dataflex)
        if dataflex is None:
            raise ConfigError(
                "DataFlexToyTrainer needs dataflex={...}, e.g. {'scorer': {'name': 'advantage_magnitude'}, "
                "'actuator': {'name': 'softmax'}}; without DataFlex use ToyTrainer"
            )
        self.dataflex.mount(
            capabilities(config),
            loss_unit=LOSS_UNITS[config.loss_agg],
            ctx={"loss_agg": config.loss_agg, "adv_estimator": "grpo"},
            adv_estimator="grpo",
            is_group_estimator=lambda name: True,
        )
        super().__init__(config, dataset)
        # the dataset, where the loop builds its prompt order: a ledger is keyed by its prompt ids (the toy loop
        # keeps its own order: it declares no train sampler)
        self.dataflex.train_sampler(ToyColumns(self.dataset), batch_size=config.prompts_per_step, seed=config.seed)
        #: The step's stages while a staged-generation mechanism (``pilot``) runs (``None`` otherwise).
        self.stages: StepStages | None = None
        staged = self.dataflex.seam(StagedGeneration)
        if staged is not None:  # before a resume restores the sampler's position
            staged.prepare(len(self.dataset), batch_size=config.prompts_per_step, seed=config.seed)

    def rollout(self, step: int) -> dict[str, torch.Tensor]:
        """The loop's batch, or under a staged-generation mechanism the stages it asks for, assembled."""
        staged = self.dataflex.seam(StagedGeneration)
        self.stages = None
        if staged is None or self.dataflex.idle(step) is not None:
            return super().rollout(step)
        cfg, gen = self.config, self.step_generator(step)
        stages = staged.stages(cfg.prompts_per_step, rollout_n=cfg.group_size)
        parts = []
        while (asked := stages.next()) is not None:
            part = self.generate(asked.prompts, asked.counts, asked.uids, gen)
            part["advantages"] = self.advantages(part)  # within the stage, for scorers that read them
            canonical = canonical_batch(part, self.log_probs(part), self.dataflex.fields, self.dataset)
            staged.observe(stages, canonical, step)
            parts.append(part)
        self.stages = stages
        return assemble(parts, stages.trained(), cfg.padding_rows)

    def loss_weights(self, batch: dict[str, torch.Tensor], step: int) -> torch.Tensor | None:
        idle = self.dataflex.idle(step)
        if idle is not None:  # before warmup_step: the loop's own loss
            self.log(idle)
            return None
        start = time.perf_counter()
        canonical = canonical_batch(batch, self.log_probs(batch), self.dataflex.fields, self.dataset)
        result = self.dataflex.run(canonical, step, generation=self.stages)
        self.log(result.timed(start).metrics)
        if result.applied is None:  # a uniform fallback, an empty step: the loop's own loss
            return None
        applied = result.applied
        return applied.unsqueeze(-1) * batch["mask"] if applied.dim() == 1 else applied

    # --8<-- [end:session]

    # --8<-- [start:checkpoints]
    def save_checkpoint(self, folder: str | os.PathLike[str]) -> None:
        # DataFlex's files first: the loop's trainer.pt, written last, is what makes the folder a checkpoint
        self.dataflex.save(folder, self.step)
        super().save_checkpoint(folder)

    def load_checkpoint(self, folder: str | os.PathLike[str]) -> None:
        self.dataflex.check_resume(folder)  # before the loop loads anything
        super().load_checkpoint(folder)
        self.dataflex.restore(folder)


# --8<-- [end:checkpoints]
