"""The DataFlex trainer mixin: mount in the constructor, run core's step in ``_compute_advantage``.

Mixed in front of a verl v1 trainer class. The lifecycle (plugin pinning,
mounting, the step with its mechanism, the train sampler, component state,
metrics) is core's :class:`~dataflex_core.session.DataFlexSession`; this
module is verl's side of it: its queue I/O, field names and padding.
Four pitfalls of verl 0.9 shape it:

- verl compares ``trainer_mode`` with ``"sync"`` in several places, so the
  constructor resets ``config.trainer.v1.trainer_mode`` to the base mode
  before verl reads it;
- only fields listed in the meta ``_compute_advantage`` returns reach the
  actor, so the weights go into the put whose meta verl returns;
- at bs=1024, L=4096 a queue round trip costs more than scoring, so the hook
  rides on verl's own get and put (:func:`dataflex_verl.queue_io.advantage_capture`)
  instead of adding its own; if verl stops putting through its module's
  ``tq``, it falls back to a read and a write after verl's step (warned once);
- TransferQueue drops missing fields silently, so every needed field is
  checked (:mod:`dataflex_verl.queue_io`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any, ClassVar

import torch
from omegaconf import open_dict
from tensordict import TensorDict
from transfer_queue import KVBatchMeta

from dataflex_core import ConfigError
from dataflex_core.session import DataFlexSession, LossWeights, PromptCounts

from . import adapter, queue_io
from . import select as dataflex_select
from .adapter import WEIGHTS_FIELD
from .checkpoint import DataFlexCheckpointMixin
from .mount import field_hints, mount
from .sampling import VerlTrainDataset, data_seed, replace_train_sampler
from .version import __version__

logger = logging.getLogger("dataflex_verl")

_warned_separate_io = False
#: The per-prompt field V1's agent loop reads its rollout count from (``AgentLoopWorkerTQ._run_prompt``).
ROLLOUT_N_KEY = "__rollout_n__"


def padding_rows(meta: KVBatchMeta) -> torch.Tensor:
    """``(bs,)`` bool: rows verl appended as padding (tag ``is_padding``, uid ``pad...``, empty mask)."""
    return torch.tensor([bool(tag.get("is_padding", False)) for tag in meta.tags], dtype=torch.bool)


class DataFlexTrainerMixin(DataFlexCheckpointMixin):
    """Adds the DataFlex pipeline to a verl v1 trainer (``class T(DataFlexTrainerMixin, PPOTrainerSync)``)."""

    #: The verl trainer mode whose behaviour this trainer keeps (``sync``, ``colocate_async``, ...).
    base_trainer_mode: ClassVar[str] = ""
    #: The mode users select (``dataflex_sync``, ...).
    dataflex_trainer_mode: ClassVar[str] = ""

    def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
        with open_dict(config):
            config.trainer.v1.trainer_mode = self.base_trainer_mode
        #: the plugin set (pinned first), the mounted pipeline, the train sampler and component state
        self.dataflex: DataFlexSession = mount(config)
        #: field -> what in the verl config writes it, for run-time "missing field" errors
        self.dataflex_field_hints = field_hints(self.dataflex.host)
        #: steps whose weights went through the fallback's own read and write (verl's put was not seen)
        self.dataflex_separate_io_steps = 0
        logger.info("dataflex-verl %s mounted on %s: %s", __version__, self.base_trainer_mode, self.dataflex.describe())
        super().__init__(config, *args, **kwargs)

    # -- the step hook ---------------------------------------------------
    def _compute_advantage(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        step = int(getattr(self, "global_steps", 0) or 0)
        idle = self.dataflex.idle(step)
        if idle is not None:  # before warmup_step: verl's step as it is, without DataFlex's reads; counted only
            metrics.update(idle)

            def count(got: TensorDict, put: TensorDict) -> TensorDict:
                metrics.update(self._dataflex_count(batch, got, put))
                return put

            with queue_io.advantage_capture(batch.keys, [], count):
                return super()._compute_advantage(batch, metrics)

        def on_put(got: TensorDict, put: TensorDict) -> TensorDict:
            return self._dataflex_on_verl_put(batch, got, put, metrics, step)

        with queue_io.advantage_capture(batch.keys, self._dataflex_extra_reads(), on_put) as capture:
            meta = super()._compute_advantage(batch, metrics)
        if capture.merged:
            metrics["dataflex/separate_io"] = 0.0
            metrics["dataflex/separate_io_total"] = float(self.dataflex_separate_io_steps)
            return meta
        global _warned_separate_io
        if not _warned_separate_io:
            _warned_separate_io = True
            logger.warning(
                "dataflex: verl's _compute_advantage did no put on the step's keys through %s.tq; "
                "falling back to a separate read and write per step (slower)",
                queue_io.VERL_TRAINER_MODULE,
            )
        return self._dataflex_after_advantage(meta, metrics)

    def _dataflex_count(self, meta: KVBatchMeta, got: TensorDict, put: TensorDict) -> dict[str, float]:
        """The compute counters of a step DataFlex does not run, from verl's own get and put (no I/O of its own)."""
        mask, advantages = got.get("response_mask"), put.get("advantages")
        return self.dataflex.count(
            mask.to_padded_tensor(0) if mask.is_nested else mask,
            advantages.to_padded_tensor(0) if advantages.is_nested else advantages,
            is_padding=padding_rows(meta),
        )

    def _dataflex_extra_reads(self) -> list[str]:
        """Fields the pipeline reads that exist before verl's put (verl's own outputs come with the put)."""
        written_by_verl = {"advantages", "returns", WEIGHTS_FIELD}
        if self.config.algorithm.use_kl_in_reward:
            written_by_verl.add("token_level_rewards")
        return [name for name in self.dataflex.fields if name not in written_by_verl]

    def _dataflex_on_verl_put(
        self, meta: KVBatchMeta, got: TensorDict, put: TensorDict, metrics: dict, step: int
    ) -> TensorDict:
        """verl's put ``put`` plus ``rollout_is_weights`` (and recomputed advantages), from verl's get ``got``."""
        start = time.perf_counter()
        data = {name: got.get(name) for name in got.keys()}
        data.update({name: put.get(name) for name in put.keys()})  # verl's outputs win (e.g. a rejection-sampled mask)
        # compose exactly when verl's put carries its own weights (verl decides from the rollout, not the config)
        fields, reads, compose = self._dataflex_plan(data.keys(), verl_weights=WEIGHTS_FIELD in put.keys())
        read = queue_io.queue_batch(data, reads, meta, held=list(data), producers=self.dataflex_field_hints)
        out = self._dataflex_step(meta, read, fields, compose, metrics, step, start)
        if out is None:
            return put
        merged = put.copy()
        for name, value in queue_io.response_fields(out, read).items():
            merged[name] = value
        return merged

    def _dataflex_after_advantage(self, meta: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        """The fallback: read after verl's put, act, write in a put of its own; return the meta that carries it.

        verl's advantages are already in the queue here, so an error stops the step after verl's put
        (the actor still never runs it); counted in ``dataflex/separate_io``.
        """
        step = int(getattr(self, "global_steps", 0) or 0)
        start = time.perf_counter()
        self.dataflex_separate_io_steps += 1
        metrics["dataflex/separate_io"] = 1.0
        metrics["dataflex/separate_io_total"] = float(self.dataflex_separate_io_steps)
        held = meta.fields or ()  # the meta of verl's put lists every field the queue holds for these keys
        fields, reads, compose = self._dataflex_plan(held, verl_weights=WEIGHTS_FIELD in held)
        read = queue_io.read_fields(meta, reads, producers=self.dataflex_field_hints)
        out = self._dataflex_step(meta, read, fields, compose, metrics, step, start)
        return meta if out is None else self._dataflex_write(meta, out, read)

    def _dataflex_plan(self, held: Iterable[str], *, verl_weights: bool) -> tuple[list[str], list[str], bool]:
        """``(fields the components see, fields to read, compose)``.

        :param held: the fields available for the step's keys.
        :param verl_weights: whether verl's put this step carried its own ``rollout_is_weights``.
        """
        fields, compose = adapter.step_fields(self.dataflex, verl_weights=verl_weights)
        # with recomputed advantages the read also carries verl's estimator inputs
        weights = self.dataflex.seam(LossWeights)
        recompute = weights is not None and weights.recompute_advantage
        estimator = dataflex_select.estimator_fields(self.config, held) if recompute else []
        # verl's advantages: the compute counters count trained rows whose advantage is zero as wasted
        return fields, list(dict.fromkeys(fields + estimator + ["advantages"])), compose

    def _dataflex_step(
        self,
        meta: KVBatchMeta,
        read: queue_io.QueueBatch,
        fields: list[str],
        compose: bool,
        metrics: dict,
        step: int,
        start: float,
    ) -> dict[str, torch.Tensor] | None:
        """The session's step on ``read``; the fields to write (``rollout_is_weights``, maybe advantages), or None."""
        return adapter.step_outputs(
            self.dataflex,
            read.batch,
            fields,
            compose=compose,
            is_padding=padding_rows(meta),
            step=step,
            start=start,
            recompute=lambda kept: dataflex_select.recompute_advantages(self.config, read.batch, meta.keys, kept),
            metrics=metrics,
        )

    def _submit_batch_to_rollout(self, batch: TensorDict) -> int:
        """verl's dispatch, with each prompt's rollout count in ``__rollout_n__`` when the mechanism gives them
        (the :class:`~dataflex_core.step.seams.PromptCounts` seam: ``mechanism: allocate``).

        V1's agent loop pops ``__rollout_n__`` from each prompt and starts that many sessions (verl#6340); the
        counts come from the session's allocator, keyed by the prompt ids (``dataflex.prompt_key``) and verl's
        ``uid`` of each prompt, so the step can check what came back.
        """
        counts = self.dataflex.seam(PromptCounts)
        if counts is not None:
            batch[ROLLOUT_N_KEY] = self._dataflex_rollout_counts(batch, counts)
        return super()._submit_batch_to_rollout(batch)

    def _dataflex_rollout_counts(self, batch: TensorDict, counts: PromptCounts) -> torch.Tensor:
        prompts = len(batch)
        train_batch = int(self.config.data.train_batch_size)
        if counts.budget is not None and prompts != train_batch:
            raise ConfigError(
                f"mechanism {self.dataflex.pipeline.mechanism} holds dataflex.allocate.budget={counts.budget} per "
                f"batch of data.train_batch_size={train_batch} prompts, but verl dispatched {prompts} prompts at once "
                "(a refill of its own filter_groups?); leave dataflex.allocate.budget null (prompts x rollout.n per "
                "dispatch)"
            )
        ids = queue_io.column_values(batch, counts.prompt_key)
        uids = queue_io.column_values(batch, "uid")
        step = int(getattr(self, "global_steps", 0) or 0)
        rollout_n = int(self.config.actor_rollout_ref.rollout.n)
        return counts.counts(ids, step, rollout_n=rollout_n, uids=uids)

    def _init_dataloader(self) -> None:
        super()._init_dataloader()
        sampler = self.dataflex.train_sampler(
            VerlTrainDataset(self.train_dataset), batch_size=self.train_dataloader.batch_size, seed=data_seed(self)
        )
        if sampler is not None:  # mix, curriculum: verl draws its prompts through DataFlex's sampler
            replace_train_sampler(self, sampler)

    def _dataflex_write(
        self, meta: KVBatchMeta, values: dict[str, torch.Tensor], read: queue_io.QueueBatch
    ) -> KVBatchMeta:
        """Fallback only: write ``values`` (``rollout_is_weights``, maybe advantages) in one put; the meta to return."""
        return queue_io.write_response_fields(meta, values, read)
