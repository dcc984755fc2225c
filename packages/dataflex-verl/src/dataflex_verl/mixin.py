"""The DataFlex trainer mixin: mount in the constructor, run core's step in ``_compute_advantage``.

Mixed in front of a verl v1 trainer class. The step itself (components on
the real rows, output checks, normalisation in the loss unit, composition with
verl's rollout-correction weights, metrics) is core's
(:class:`dataflex_core.step.DataFlexStep`); this module is verl's side of it.
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

from dataflex_core import Batch
from dataflex_core.lock.pinning import resolve_plugins
from dataflex_core.step import DataFlexStep

from . import curriculum as dataflex_curriculum
from . import mix as dataflex_mix
from . import queue_io
from . import select as dataflex_select
from .checkpoint import DataFlexCheckpointMixin
from .mount import MountedDataFlex, config_value, is_group_estimator, mount
from .version import __version__

logger = logging.getLogger("dataflex_verl")

#: The field verl's policy losses multiply into ``pg_losses``.
WEIGHTS_FIELD = "rollout_is_weights"

_warned_separate_io = False


def only_fields(batch: Batch, names: list[str]) -> Batch:
    """``batch`` limited to the fields ``names`` (and ``response_mask``): what the components may see."""
    keep = {"response_mask", *names}
    return Batch(
        {k: v for k, v in batch.batch.items() if k in keep},
        {k: v for k, v in batch.non_tensor_batch.items() if k in keep},
        batch.meta_info,
    )


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
        # first: with dataflex.plugins.lock only locked plugins are imported, and any drift stops the run here
        self.dataflex_plugins = resolve_plugins(config_value(config, "dataflex", None))
        self.dataflex: MountedDataFlex = mount(config)
        self.dataflex_step = DataFlexStep(self.dataflex)
        #: mechanism curriculum: the train sampler, with the prompt history (set in _init_dataloader)
        self.dataflex_curriculum_sampler: dataflex_curriculum.CurriculumSampler | None = None
        #: steps whose weights went through the fallback's own read and write (verl's put was not seen)
        self.dataflex_separate_io_steps = 0
        logger.info("dataflex-verl %s mounted on %s: %s", __version__, self.base_trainer_mode, self.dataflex.describe())
        super().__init__(config, *args, **kwargs)

    # -- the step hook ---------------------------------------------------
    def _compute_advantage(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        step = int(getattr(self, "global_steps", 0) or 0)
        # a curriculum's history is fed during warm-up too (its draws are uniform until warmup_step)
        if not self.dataflex.pipeline.active(step) and self.dataflex.curriculum is None:
            metrics["dataflex/active"] = 0.0
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
        fields, reads, compose, recompute = self._dataflex_plan(data.keys(), verl_weights=WEIGHTS_FIELD in put.keys())
        read = queue_io.queue_batch(data, reads, meta, held=list(data), producers=self.dataflex.field_hints)
        out = self._dataflex_step(meta, read, fields, compose, recompute, metrics, step, start)
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
        fields, reads, compose, recompute = self._dataflex_plan(held, verl_weights=WEIGHTS_FIELD in held)
        read = queue_io.read_fields(meta, reads, producers=self.dataflex.field_hints)
        out = self._dataflex_step(meta, read, fields, compose, recompute, metrics, step, start)
        return meta if out is None else self._dataflex_write(meta, out, read)

    def _dataflex_plan(self, held: Iterable[str], *, verl_weights: bool) -> tuple[list[str], list[str], bool, bool]:
        """``(fields the components see, fields to read, compose, recompute)``.

        :param held: the fields available for the step's keys.
        :param verl_weights: whether verl's put this step carried its own ``rollout_is_weights``.
        """
        held = set(held)
        fields = list(self.dataflex.fields)
        compose = verl_weights
        if compose and WEIGHTS_FIELD not in fields:
            fields.append(WEIGHTS_FIELD)
        recompute = self._dataflex_recomputes_advantage()
        # with recomputed advantages the read also carries verl's estimator inputs
        estimator = dataflex_select.estimator_fields(self.config, held) if recompute else []
        return fields, list(dict.fromkeys(fields + estimator)), compose, recompute

    def _dataflex_step(
        self,
        meta: KVBatchMeta,
        read: queue_io.QueueBatch,
        fields: list[str],
        compose: bool,
        recompute: bool,
        metrics: dict,
        step: int,
        start: float,
    ) -> dict[str, torch.Tensor] | None:
        """Core's step on ``read``; the fields to write (``rollout_is_weights``, maybe advantages), or None."""
        batch = only_fields(read.batch, fields)  # components see what they declared, as without recomputation
        batch.batch["is_padding"] = padding_rows(meta)
        if self.dataflex.mix is not None:  # mix acts on the sampler, not on the loss
            metrics.update(self.dataflex_step.mix(batch, step, self.dataflex_sampler, start=start))
            return None
        if self.dataflex.curriculum is not None:  # so does curriculum: the step's rewards feed its history
            metrics.update(self.dataflex_step.curriculum(batch, step, self.dataflex_curriculum_sampler, start=start))
            return None
        verl_weights = batch.batch.get(WEIGHTS_FIELD) if compose else None
        result = self.dataflex_step.run(batch, step, importance_weights=verl_weights, start=start)
        if result.applied is None:  # a uniform fallback: verl's loss as it is
            metrics.update(result.metrics)
            return None
        advantages: dict[str, torch.Tensor] = {}
        if self.dataflex.mechanism == "select":
            result.metrics["dataflex/advantage_recomputed"] = 1.0 if recompute else 0.0
            if recompute:
                advantages = dataflex_select.recompute_advantages(self.config, read.batch, meta.keys, result.kept)
                result.metrics["dataflex/hook_time_s"] = time.perf_counter() - start
        metrics.update(result.metrics)
        return {**advantages, WEIGHTS_FIELD: result.applied}

    def _dataflex_recomputes_advantage(self) -> bool:
        """True when a selector asks for advantages on its kept rows and verl's estimator is group-based."""
        return (
            self.dataflex.mechanism == "select"
            and bool(self.dataflex.pipeline.actuator.recompute_advantage)
            and bool(is_group_estimator(self.dataflex.adv_estimator))
        )

    def _dataflex_weights(self, batch: Batch, step: int) -> torch.Tensor:
        """The mechanism on non-padding rows; raw weights scattered back to every row (0 on padding)."""
        return self.dataflex_step.raw_weights(batch, step)

    def _init_dataloader(self) -> None:
        super()._init_dataloader()
        if self.dataflex.mix is not None:
            self.dataflex_sampler = dataflex_mix.install_sampler(self)
        if self.dataflex.curriculum is not None:
            self.dataflex_curriculum_sampler = dataflex_curriculum.install_sampler(self)

    def _dataflex_write(
        self, meta: KVBatchMeta, values: dict[str, torch.Tensor], read: queue_io.QueueBatch
    ) -> KVBatchMeta:
        """Fallback only: write ``values`` (``rollout_is_weights``, maybe advantages) in one put; the meta to return."""
        return queue_io.write_response_fields(meta, values, read)
