"""A dataloader sampler that draws each batch of prompts by a curriculum's probabilities.

``mechanism: curriculum`` acts where a framework picks prompts: the train
dataloader's sampler. Each block of ``batch_size`` rows is drawn from the
candidates (every row, or the next ``candidates`` rows of a shuffled pass, so
every prompt is a candidate once per pass) by systematic sampling: candidate
``i`` appears ``floor(B p_i)`` or ``ceil(B p_i)`` times, so a batch repeats a
prompt only when its probability exceeds ``1 / B``. The block is scored when the
dataloader asks for it: a framework that prefetches scores it on the history as
it was then. A host that checkpoints the sampler (verl's ``StatefulDataLoader``)
resumes the same draws.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..batch import Batch
from ..config import DataFlexPipeline
from ..contracts import check_probabilities, check_prompt_scores
from ..errors import ConfigError
from ..state_fields import StateFieldError, count, field, rows
from .blocks import BlockSampler, systematic_positions
from .context import StepContext
from .fields import is_prompt_field
from .history import PromptHistory

#: Prefix of the curriculum's metrics (the draw's are under ``draw/``).
METRIC_PREFIX = "dataflex/curriculum/"


def candidate_fields(pipeline: DataFlexPipeline) -> list[str]:
    """The history fields (:data:`PROMPT_FIELDS`) the scorer and the sampler read from the candidates."""
    names = [*pipeline.scorer.requires, *pipeline.actuator.requires]
    return list(dict.fromkeys(name for name in names if is_prompt_field(name)))


def candidate_columns(pipeline: DataFlexPipeline) -> list[str]:
    """The dataset columns the scorer and the sampler read from the candidates (every other name they require)."""
    names = [*pipeline.scorer.requires, *pipeline.actuator.requires]
    return list(dict.fromkeys(name for name in names if not is_prompt_field(name) and name != "response_mask"))


def candidate_batch(
    history: PromptHistory,
    rows: torch.Tensor,
    fields: Sequence[str],
    columns: Mapping[str, np.ndarray],
) -> Batch:
    """The candidates ``rows`` as a batch: ``prompt_index`` (always, as ``response_mask`` is in a step's batch)
    and the history ``fields`` in ``.batch``/``.non_tensor_batch``, the dataset ``columns`` (each a numpy
    array over every dataset row) in ``.non_tensor_batch``."""
    values = history.fields(rows, list(dict.fromkeys(["prompt_index", *fields])))
    tensors = {k: v for k, v in values.items() if isinstance(v, torch.Tensor)}
    objects: dict[str, np.ndarray] = {k: v for k, v in values.items() if not isinstance(v, torch.Tensor)}
    index = rows.numpy()
    for name, column in columns.items():
        objects[name] = np.asarray(column[index], dtype=object)
    return Batch(tensors, objects)


class CurriculumSampler(BlockSampler):
    """Yields dataset rows drawn block by block with the curriculum's probabilities.

    :param step: the mounted step (its pipeline's scorer and sampler, ``on_invalid``, the components' ctx).
    :param history: the prompt history the scorer reads (one entry per dataset row).
    :param columns: the dataset columns the components read, each a sequence over every dataset row.
    :param batch_size: prompts per block (the dataloader's batch size).
    :param seed: seed of the sampler's own generator.
    :param candidates: candidates per block from a shuffled pass over the dataset; 0 scores every prompt.
    """

    def __init__(
        self,
        step: StepContext,
        history: PromptHistory,
        columns: Mapping[str, Any],
        batch_size: int,
        *,
        seed: int = 0,
        candidates: int = 0,
    ) -> None:
        self.step = step
        self.history = history
        rows = len(history)
        super().__init__(rows, batch_size, seed)
        self.columns = {name: np.asarray(list(values), dtype=object) for name, values in columns.items()}
        for name, values in self.columns.items():
            if len(values) != rows:
                raise ValueError(f"dataset column {name!r} has {len(values)} values for {rows} prompts")
        if candidates and not self.batch_size <= candidates <= rows:
            raise ConfigError(
                f"dataflex.candidates={candidates} must lie between the prompts per batch ({self.batch_size}) and the "
                f"train dataset's {rows} prompts (0 scores every prompt)"
            )
        self.num_candidates = candidates or rows
        self.fields = candidate_fields(step.pipeline)
        self._pass = torch.randperm(rows, generator=self.generator) if candidates else torch.arange(rows)
        self._cursor = 0
        #: How many times each dataset row has been drawn.
        self.draws = torch.zeros(rows, dtype=torch.long)
        #: The last block's ``dataflex/curriculum/draw/...`` metrics (hosts log them with the step).
        self.draw_metrics: dict[str, float] = {}
        #: The probabilities of the last block's draw over its candidates (rows, probabilities).
        self.last_probabilities: tuple[torch.Tensor, torch.Tensor] | None = None

    def candidates(self) -> torch.Tensor:
        """The rows scored for the next block: all of them, or the next ``candidates`` of the shuffled pass."""
        rows = len(self.history)
        if self.num_candidates == rows:
            return torch.arange(rows)
        if self._cursor + self.num_candidates > len(self._pass):
            return self._wrap()
        out = self._pass[self._cursor : self._cursor + self.num_candidates].clone()  # the block's own rows
        self._cursor += self.num_candidates
        return out

    def _wrap(self) -> torch.Tensor:
        """The pass's last rows, then the first rows of a new pass not among them (no prompt twice in a draw); the
        new pass goes on without the rows taken here, so each prompt is a candidate once per pass. Beyond the
        one ``randperm`` the work is O(candidates): the rows taken lie among the new pass's first ones."""
        rest = self._pass[self._cursor :]
        need = self.num_candidates - len(rest)  # >= 1: the pass has fewer rows left than a draw takes
        fresh = torch.randperm(len(self.history), generator=self.generator)
        head = fresh[: need + len(rest)]
        in_rest = torch.isin(head, rest)
        outside = (~in_rest).nonzero().reshape(-1)[:need]
        taken = head[outside]
        end = int(outside[-1]) + 1
        skipped = head[:end][in_rest[:end]]  # the old pass's rows before the last taken: still in the new pass
        start = end - len(skipped)
        out = torch.cat([rest, taken])
        fresh[start:end] = skipped
        self._pass, self._cursor = fresh, start
        return out

    def probabilities(self, rows: torch.Tensor, step: int) -> tuple[torch.Tensor, bool]:
        """``(probabilities over rows (float64), uniform)``: the curriculum's, or uniform before warm-up or on a
        fallback."""
        n = len(rows)
        if self.step.active(step):
            batch = candidate_batch(self.history, rows, self.fields, self.columns)
            ctx, calls = self.step.ctx, self.step.calls

            def draw() -> torch.Tensor:
                scores = calls.call("scorer", "score", batch, step, at_step=step, **ctx)
                scores = check_prompt_scores(scores, n, owner=calls.label("scorer"), step=step)
                proposed = calls.call("actuator", "act", scores, batch, at_step=step, step_id=step, **ctx)
                return check_probabilities(proposed, n, owner=calls.label("actuator"), step=step)

            p, fell_back = self.step.on_invalid.attempt(draw, step=step, instead="drawing uniformly")
            if not fell_back:
                return p, False
        return torch.full((n,), 1.0 / n, dtype=torch.float64), True

    def next_block(self, size: int | None = None) -> list[int]:
        """Draw the next block of ``size`` (default ``batch_size``) dataset rows for step ``history.last_step + 1``;
        a refill round of another size (``Scorer.next_draw_size``) passes its own."""
        step = self.history.last_step + 1
        rows = self.candidates()
        p, uniform = self.probabilities(rows, step)
        # int32 where it fits: the same permutation and generator state as int64, and a faster shuffle and gather
        index_dtype = torch.int32 if len(rows) < 2**31 else torch.long
        order = torch.randperm(len(rows), generator=self.generator, dtype=index_dtype)
        positions = systematic_positions(p.index_select(0, order), size or self.batch_size, self.generator)
        picks = rows[order[positions]]  # in the random order, each as often as systematic sampling counts it
        self.draws.index_add_(0, picks, torch.ones_like(picks))
        self.last_probabilities = (rows, p)  # both fresh tensors of this block
        every = len(rows) == len(self.history)  # rows is arange(len(history)): no gather of the history
        unseen = (self.history.times_sampled if every else self.history.times_sampled[rows]) == 0
        _, multiplicity = torch.unique_consecutive(positions, return_counts=True)
        self.draw_metrics = {
            # the last step the history had seen: step - 1 when nothing prefetches (verl's sync trainer), older
            # when the framework fetches batches ahead (TRL through accelerate: one batch)
            f"{METRIC_PREFIX}draw/history_step": float(self.history.last_step),
            f"{METRIC_PREFIX}draw/candidates": float(len(rows)),
            f"{METRIC_PREFIX}draw/uniform": 1.0 if uniform else 0.0,
            f"{METRIC_PREFIX}draw/max_probability": float(p.max()),
            # 1 / sum p^2: how many candidates the draw effectively spreads over, as a share of them
            f"{METRIC_PREFIX}draw/effective_fraction": float(1.0 / torch.dot(p, p)) / len(rows),
            f"{METRIC_PREFIX}draw/unseen_share": float(torch.dot(p, unseen.to(p.dtype))),
            f"{METRIC_PREFIX}draw/repeated_prompts": float((multiplicity > 1).sum()),
        }
        return picks[torch.randperm(len(picks), generator=self.generator)].tolist()

    def state_dict(self) -> dict[str, Any]:
        return {
            **self.block_state(),
            "pass": self._pass.clone(),
            "cursor": self._cursor,
            "draws": self.draws.clone(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take :meth:`state_dict`, checked field by field: the pass one entry per dataset row, the cursor a
        position in it and the rows after it distinct, the draw counts one whole number per row, never negative."""
        draws = field(state, "draws")
        if isinstance(draws, torch.Tensor) and draws.dim() == 1 and len(draws) != len(self.history):
            raise ConfigError(
                f"the checkpoint's curriculum sampler drew from {len(draws)} prompts, but this run's train "
                f"dataset has {len(self.history)}; resume with the same train files"
            )
        if not isinstance(draws, torch.Tensor) or draws.dtype != torch.long or draws.dim() != 1:
            raise StateFieldError("draws", draws, "the draw counts are a 1-D int64 tensor, one per dataset row")
        if len(draws) and int(draws.min()) < 0:
            raise StateFieldError("draws", draws, f"a draw count is never negative (row {int(draws.argmin())})")
        self.load_block_state(state)
        # a pass's rows before the cursor are spent (after a wrap some stand twice there): the rest is checked
        passed = rows(state, "pass", len(self.history), distinct=False)
        if len(passed) != len(self.history):
            raise StateFieldError("pass", passed, f"a pass has the dataset's {len(self.history)} rows")
        cursor = count(state, "cursor", high=len(passed))
        rows({"pass": passed[cursor:]}, "pass", len(self.history))  # the rows the pass has yet to give: distinct
        self._pass, self._cursor = passed, cursor
        self.draws = draws.clone()
