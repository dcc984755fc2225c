"""``mechanism: pilot`` on verl's legacy line: a step's rollouts generated in stages where ``RayPPOTrainer.fit``
pulls its prompts.

The stages run at the same pull as the filter's rounds (:mod:`dataflex_verl.legacy_rounds`: fit itself is not
changed, the replicas are awake with the step's weights): the pulled prompt batch is screened first (named by
verl's ``index`` column, the dataset row in verl's preprocessing scripts; without one the screened prompts all
come from the pilot's seeded shuffle of the dataset), further screened prompts are dataset rows from that
shuffle, collated as fit's dataloader collates them. Each stage is the mechanism's requests, generated as fit
generates a batch (:func:`~dataflex_verl.legacy_rounds.roll_out`: exactly ``counts[i]`` rollouts of prompt
``i`` under its integer ``uid``) and handed to the session with verl's streamed rewards (``rm_scores``);
the commit stage tops the admitted prompts up under the uids of their pilot rollouts.

fit trains ``rollout.n`` rollouts per prompt, consecutive: the loader yields the committed prompts and fit's
generate call gets back each one's trained rows (the rows ``stages.trained()`` names), group by group, stage
after stage within a group, under the uid fit gives that prompt. A stage mechanism whose trained groups are
not ``rollout.n`` each is stopped naming the sizes (fit's own repetition could not hold them).

The stages run before fit's step timer starts, so their wall time is handed to fit's ``gen`` and ``step`` timers
(as the filter's rounds are) and logged per step as ``dataflex/pilot/stages_time_s``, split into the replicas'
generate calls (``dataflex/pilot/generation_time_s``) and the rest, the seam's own cost
(``dataflex/pilot/seam_time_s``: prompt table, ``roll_out``'s batches, admission, top-up assembly).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from dataflex_core.session import StagedGeneration

from . import dataproto_io
from .legacy_rounds import (
    ROW_COLUMN,
    Generated,
    PullGeneration,
    concat_rows,
    generating_at_pull,
    prompt_count,
    roll_out,
    rollout_n,
    select_rows,
)


def drawn_rows(batch_dict: dict[str, Any]) -> torch.Tensor | None:
    """The pulled prompts' ``index`` column as int64 (what the stages screen first), ``None`` when it has none."""
    column = batch_dict.get(ROW_COLUMN)
    if column is None:
        return None
    try:
        return torch.as_tensor(np.asarray(column).astype(np.int64), dtype=torch.long)
    except (TypeError, ValueError):
        return None


class PromptTable:
    """Every prompt screened in a step, collated: row ``u`` is the prompt of uid ``u`` (uids are given in order).

    :param pulled: the prompts fit pulled (screened first, in order when the stages name them, less those the
        mechanism evicted), or ``None``.
    """

    def __init__(self, trainer: Any, pulled: dict[str, Any] | None, drawn: torch.Tensor | None) -> None:
        self.trainer = trainer
        self.pulled, self.drawn = pulled, drawn
        self.parts: list[dict[str, Any]] = []
        self.known = 0
        #: The first pulled prompt not screened yet (one the mechanism evicted is skipped).
        self.drawn_next = 0
        self.table: dict[str, Any] | None = None

    def add(self, uids: torch.Tensor, prompts: torch.Tensor) -> None:
        """Collate the prompts of uids not seen yet (``prompts``: their dataset rows or pulled ids)."""
        new = uids >= self.known
        if not bool(new.any()):
            return
        fresh, rows = uids[new], prompts[new]
        if not torch.equal(fresh, torch.arange(self.known, self.known + len(fresh))):
            raise RuntimeError(
                f"the staged-generation seam gave new prompts uids {fresh.tolist()}, not the next ones from "
                f"{self.known}: verl's legacy host numbers a step's prompts in the order they are screened"
            )
        # the pulled prompts come first, in their order, less those the mechanism evicted (``evict_solved``): their
        # collated rows are reused; every other prompt (a carried one may repeat a pulled row) is collated anew
        position = {} if self.drawn is None else {int(r): i for i, r in enumerate(self.drawn.tolist())}
        at: list[int] = []
        for row in rows.tolist():
            if position.get(row, -1) < self.drawn_next:
                break
            at.append(position[row])
            self.drawn_next = at[-1] + 1
        if at:
            self.parts.append(select_rows(self.pulled, torch.tensor(at, dtype=torch.long)))
        if len(at) < len(fresh):
            loader, dataset = self.trainer.train_dataloader, self.trainer.train_dataset
            self.parts.append(loader.collate_fn([dataset[int(i)] for i in rows[len(at) :]]))
        self.known += len(fresh)
        self.table = concat_rows(self.parts)

    def rows(self, uids: torch.Tensor) -> dict[str, Any]:
        assert self.table is not None
        return select_rows(self.table, uids)


class PilotStagesRounds(PullGeneration):
    """One legacy trainer's staged generation, for a mechanism that needs it (``mechanism: pilot``)."""

    seam: StagedGeneration

    def generate_step(self, batch_dict: dict[str, Any], step: int) -> Generated:
        """The stages from the pulled batch (screened first) to the commit; the trained groups' rollouts."""
        trainer = self.trainer
        n = rollout_n(trainer)
        drawn = drawn_rows(batch_dict)
        stages = self.seam.stages(prompt_count(batch_dict), rollout_n=n, drawn=drawn)
        table = PromptTable(trainer, batch_dict, drawn)
        replicas = GenerationClock(self.rollout.manager)
        parts: list[tuple[Any, torch.Tensor]] = []  # per stage: its rollouts, each row's uid
        generated = torch.zeros(0, dtype=torch.long)  # per uid, its rollouts so far
        while (asked := stages.next()) is not None:
            table.add(asked.uids, asked.prompts)
            generated = torch.cat([generated, torch.zeros(table.known - len(generated), dtype=torch.long)])
            uids = np.array(asked.uids.tolist(), dtype=object)
            rollouts, data = roll_out(
                trainer, replicas, table.rows(asked.uids), uids, asked.counts, step, "pilot",
                offsets=generated[asked.uids],
            )  # fmt: skip
            generated.index_add_(0, asked.uids, asked.counts)
            read = dataproto_io.read_batch(data, trainer.dataflex.fields, producers=trainer.dataflex_field_hints)
            self.seam.observe(stages, read, step)
            parts.append((rollouts, asked.uids.repeat_interleave(asked.counts)))
        out, committed = trained_groups(parts, stages.trained(), n)
        return Generated(out, table.rows(committed), parts[0][0].meta_info, stages, replicas.seconds)

    def timings(self, spent: float, made: Generated) -> dict[str, float]:
        return stage_times(spent, made.generate_s)


#: The stages' wall time (their generation and the seam's own work), the generation alone, and the seam alone.
STAGES_TIME, GENERATION_TIME, SEAM_TIME = (f"dataflex/pilot/{name}_time_s" for name in ("stages", "generation", "seam"))


def stage_times(stages_s: float, generation_s: float) -> dict[str, float]:
    """A step's stage metrics: the seam's own time (prompt table, ``roll_out``'s batch building, admission, top-up
    assembly) is the stages' time less the replicas' generate calls, so it is comparable across generation speeds
    (``benchmarks/README.md``, case 9)."""
    return {STAGES_TIME: stages_s, GENERATION_TIME: generation_s, SEAM_TIME: stages_s - generation_s}


class GenerationClock:
    """verl's rollout manager, each ``generate_sequences`` call timed: ``seconds`` is the stages' generation (the
    replicas' rollouts and the rewards verl streams with them), the part of the stages' time that is not the seam's.

    Every other attribute is the manager's.
    """

    def __init__(self, manager: Any) -> None:
        self.manager = manager
        self.seconds = 0.0

    def generate_sequences(self, prompts: Any) -> Any:
        began = time.perf_counter()
        try:
            return self.manager.generate_sequences(prompts)
        finally:
            self.seconds += time.perf_counter() - began

    def __getattr__(self, name: str) -> Any:
        return getattr(self.manager, name)


def trained_groups(parts: list[tuple[Any, torch.Tensor]], trained: list[torch.Tensor], n: int) -> tuple[Any, Any]:
    """The trained rows of every stage as fit lays out a step (each group's ``n`` rows consecutive, groups in uid
    order, stages in order within a group), and the groups' uids.

    The batch is allocated once and each stage's kept rows are written straight to their final rows: one copy of
    the trained batch, not the three of ``select_idxs`` per stage, ``DataProto.concat`` and a reorder (the seam's
    largest cost per step, ``benchmarks/README.md``). ``meta_info`` is empty: the caller sets the step's.

    :raises RuntimeError: a trained group that is not ``n`` rows (fit repeats each prompt ``n`` times), or stages
        whose rows do not share fields, shapes and dtypes (one batch cannot hold them).
    """
    kept = [_kept_rows(keep, len(uids)) for (_, uids), keep in zip(parts, trained)]
    uid = torch.cat([uids[keep] for (_, uids), keep in zip(parts, kept)])  # stage after stage
    order = torch.argsort(uid, stable=True)  # each group's rows together, in stage order
    committed, sizes = torch.unique_consecutive(uid[order], return_counts=True)
    if not bool((sizes == n).all()):
        raise RuntimeError(
            f"the staged generation trains groups of {sizes.tolist()} rollouts, but verl's legacy fit trains "
            f"actor_rollout_ref.rollout.n={n} per prompt: a mechanism of the staged_generation seam on this host "
            "tops every trained group up to rollout.n"
        )
    final = torch.empty_like(order)
    final[order] = torch.arange(len(order))  # the final row of each kept row, stage after stage
    used = [Kept(stage, rollouts, keep) for stage, ((rollouts, _), keep) in enumerate(zip(parts, kept)) if len(keep)]
    used = used or [Kept(0, parts[0][0], kept[0])]  # nothing trained: an empty batch of the first stage's fields
    into = torch.split(final, [len(part.keep) for part in used])
    return assembled(used, into, len(order)), committed


def _kept_rows(keep: torch.Tensor, rows: int) -> torch.Tensor:
    """``stages.trained()``'s entry for a stage as int64 row indices (a boolean mask is accepted too)."""
    keep = torch.as_tensor(keep)
    if keep.dtype == torch.bool:
        return keep.nonzero().flatten()
    if len(keep) and (int(keep.min()) < 0 or int(keep.max()) >= rows):
        raise RuntimeError(
            f"the staged generation keeps rows {keep.tolist()} of a stage of {rows} rows: stages.trained() names "
            "rows of each stage as it was handed to observe"
        )
    return keep.long()


@dataclass
class Kept:
    """A stage that the trained batch keeps rows of: its number, its rollouts (verl's), the kept rows."""

    stage: int
    rollouts: Any
    keep: torch.Tensor
    #: Every row kept, in order: the stage's tensors are copied as they are, without a gather first.
    whole: bool = field(init=False)

    def __post_init__(self) -> None:
        rows = len(self.rollouts)
        self.whole = len(self.keep) == rows and bool(torch.equal(self.keep, torch.arange(rows)))


def assembled(used: list[Kept], into: tuple[torch.Tensor, ...], total: int) -> Any:
    """One ``DataProto`` of ``total`` rows, allocated once: ``used[s]``'s kept rows written to rows ``into[s]``.

    Tensors field by field (``index_copy_`` into the final rows), each non-tensor column by one fancy index of the
    stages' columns; fields keep the first stage's order, ``meta_info`` is empty.
    """
    from tensordict import TensorDict

    first = used[0].rollouts
    fields = list(first.batch.keys(include_nested=True, leaves_only=True))
    columns = list(first.non_tensor_batch)
    _check_same_fields(used, fields, columns)
    out = TensorDict({}, batch_size=[total], device=first.batch.device)
    for name in fields:
        like = first.batch.get(name)
        if not isinstance(like, torch.Tensor):
            raise RuntimeError(
                f"the staged rollouts' field {name!r} is a {type(like).__name__}: verl's rollouts hold tensors in "
                "their batch (and other values in non_tensor_batch), which is what the staged assembly copies"
            )
        buffer = like.new_empty((total, *like.shape[1:]))
        for part, rows in zip(used, into):
            piece = _stage_field(part, name, like)
            buffer.index_copy_(0, rows, piece if part.whole else piece.index_select(0, part.keep))
        out.set(name, buffer)
    source = np.empty(total, dtype=np.int64)  # each final row's row among the used stages' rows, stage after stage
    starts = np.cumsum([0] + [len(part.rollouts) for part in used[:-1]])
    source[torch.cat(into).numpy()] = torch.cat([part.keep + int(at) for part, at in zip(used, starts)]).numpy()
    non_tensor = {
        column: np.concatenate([part.rollouts.non_tensor_batch[column] for part in used])[source] for column in columns
    }
    return type(first)(batch=out, non_tensor_batch=non_tensor, meta_info={})


def _stage_field(part: Kept, name: Any, like: torch.Tensor) -> torch.Tensor:
    """The stage's tensor ``name``, checked against the first stage's (one batch holds them)."""
    piece = part.rollouts.batch.get(name)
    if not isinstance(piece, torch.Tensor) or piece.dtype != like.dtype or piece.shape[1:] != like.shape[1:]:
        raise RuntimeError(
            f"stage {part.stage} of the staged generation returned field {name!r} as {_described(piece)}, the "
            f"first stage as {_described(like)}: every stage's rollouts must have the fields, per-row shapes and "
            "dtypes of the first (a step's rollout has one response_length)"
        )
    return piece


def _described(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{tuple(value.shape)} {value.dtype}"
    return type(value).__name__


def _check_same_fields(used: list[Kept], fields: list[Any], columns: list[str]) -> None:
    """Every stage has the first stage's tensor fields and non-tensor columns, no more and no fewer."""
    for part in used[1:]:
        has = list(part.rollouts.batch.keys(include_nested=True, leaves_only=True))
        if set(has) != set(fields) or set(part.rollouts.non_tensor_batch) != set(columns):
            raise RuntimeError(
                f"stage {part.stage} of the staged generation returned fields {sorted(map(str, has))} and columns "
                f"{sorted(part.rollouts.non_tensor_batch)}, the first stage {sorted(map(str, fields))} and "
                f"{sorted(columns)}: every stage's rollouts must have the same fields"
            )


def installed(trainer: Any) -> contextlib.AbstractContextManager[None]:
    """While inside (fit), ``trainer``'s dataloader and rollout manager generate the step in stages for a mechanism
    that needs it (the :class:`~dataflex_core.step.seams.StagedGeneration` seam)."""
    return generating_at_pull(trainer, StagedGeneration, PilotStagesRounds)


__all__ = [
    "GENERATION_TIME",
    "SEAM_TIME",
    "STAGES_TIME",
    "GenerationClock",
    "Kept",
    "PilotStagesRounds",
    "PromptTable",
    "assembled",
    "drawn_rows",
    "installed",
    "stage_times",
    "trained_groups",
]
