"""The DataFlex trainer mixin: mount in the constructor, reweight in ``_compute_advantage``.

Mixed in front of a verl v1 trainer class. Four pitfalls of verl 0.9 shape it:

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

The per-step work is split into small methods (:meth:`_dataflex_weights`,
:meth:`_dataflex_finalize`, :meth:`_dataflex_on_verl_put`) so later
mechanisms and checkpointing can hook in.
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

from dataflex_core import Batch, InvalidOutputError, prepare_batch, valid_token_mask

from . import metrics as dataflex_metrics
from . import mix as dataflex_mix
from . import queue_io
from . import select as dataflex_select
from .checkpoint import DataFlexCheckpointMixin
from .mechanisms import RUNNERS
from .mount import MountedDataFlex, is_group_estimator, mount
from .pinning import resolve_plugins
from .version import __version__
from .weights import finalize

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
        self.dataflex_plugins = resolve_plugins(config)
        self.dataflex: MountedDataFlex = mount(config)
        self.dataflex_uniform_fallbacks = 0
        #: steps whose weights went through the fallback's own read and write (verl's put was not seen)
        self.dataflex_separate_io_steps = 0
        logger.info("dataflex-verl %s mounted on %s: %s", __version__, self.base_trainer_mode, self.dataflex.describe())
        super().__init__(config, *args, **kwargs)

    # -- the step hook ---------------------------------------------------
    def _compute_advantage(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        step = int(getattr(self, "global_steps", 0) or 0)
        if not self.dataflex.pipeline.active(step):
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
        """Score and act on ``read``; the fields to write (``rollout_is_weights``, maybe advantages), or None."""
        batch = only_fields(read.batch, fields)  # components see what they declared, as without recomputation
        batch.batch["is_padding"] = padding_rows(meta)
        prepare_batch(batch)  # masks, token counts and the uid groups: computed once for the whole step
        if self.dataflex.mix is not None:  # mix acts on the sampler, not on the loss
            metrics.update(self._dataflex_mix_step(batch, step))
            return None
        valid_tokens = valid_token_mask(batch)
        verl_weights = batch.batch.get(WEIGHTS_FIELD) if compose else None
        try:
            raw = self._dataflex_weights(batch, step)
            written, factor = self._dataflex_finalize(raw, valid_tokens, verl_weights, step)
        except InvalidOutputError as exc:
            if self.dataflex.on_invalid == "raise":
                raise
            self.dataflex_uniform_fallbacks += 1
            logger.warning("dataflex: %s; using uniform weights for step %d (dataflex.on_invalid=uniform)", exc, step)
            metrics.update(self._dataflex_step_metrics(None, None, valid_tokens, None, start, fallback=True))
            return None
        advantages: dict[str, torch.Tensor] = {}
        if self.dataflex.mechanism == "select":
            advantages = self._dataflex_select_step(meta, batch, read, raw > 0, recompute, metrics)
        metrics.update(self._dataflex_step_metrics(factor, written, valid_tokens, verl_weights, start, fallback=False))
        return {**advantages, WEIGHTS_FIELD: written}

    def _dataflex_recomputes_advantage(self) -> bool:
        """True when a selector asks for advantages on its kept rows and verl's estimator is group-based."""
        return (
            self.dataflex.mechanism == "select"
            and dataflex_select.wants_recompute(self.dataflex.pipeline.actuator)
            and bool(is_group_estimator(self.dataflex.adv_estimator))
        )

    def _dataflex_weights(self, batch: Batch, step: int) -> torch.Tensor:
        """Run the mechanism on non-padding rows; raw weights scattered back to every row (0 on padding)."""
        padding = batch.batch["is_padding"]
        runner = RUNNERS[self.dataflex.mechanism]
        if not padding.any():
            return runner(self.dataflex, batch, step)
        keep = ~padding
        sub = batch.select_rows(keep)
        weights = runner(self.dataflex, sub, step)
        full = torch.zeros((len(batch), *weights.shape[1:]), dtype=torch.float32, device=weights.device)
        full[keep.to(weights.device)] = weights.to(torch.float32)
        return full

    def _dataflex_finalize(
        self, raw: torch.Tensor, valid_tokens: torch.Tensor, verl_weights: torch.Tensor | None, step: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        try:
            written, factor = finalize(raw, valid_tokens, self.dataflex.loss_unit, verl_weights)
        except InvalidOutputError as exc:
            spec = self.dataflex.pipeline.actuator_spec
            raise InvalidOutputError(
                f"{spec.kind} {spec.label} returned invalid weights at step {step}: {exc}"
            ) from exc
        if not torch.isfinite(written).all():
            spec = self.dataflex.pipeline.actuator_spec
            raise InvalidOutputError(
                f"{spec.kind} {spec.label} at step {step}: the normalised weights are not finite "
                "(weights too extreme to scale to mean one)"
            )
        return written, factor

    def _dataflex_select_step(
        self,
        meta: KVBatchMeta,
        batch: Batch,
        read: queue_io.QueueBatch,
        kept: torch.Tensor,
        recompute: bool,
        metrics: dict,
    ) -> dict[str, torch.Tensor]:
        """Selection metrics; with ``recompute``, advantages and returns of the kept rows for the step's write."""
        metrics.update(dataflex_select.selection_metrics(kept, batch))
        metrics["dataflex/advantage_recomputed"] = 1.0 if recompute else 0.0
        if not recompute:
            return {}
        return dataflex_select.recompute_advantages(self.config, read.batch, meta.keys, kept)

    def _dataflex_mix_step(self, batch: Batch, step: int) -> dict[str, float]:
        """Feed the step's per-domain signal to the mixer; the sampler picks up new proportions."""
        try:
            return dataflex_mix.mix_step(self.dataflex, self.dataflex_sampler, batch, step)
        except InvalidOutputError as exc:
            if self.dataflex.on_invalid == "raise":
                raise
            self.dataflex_uniform_fallbacks += 1
            logger.warning(
                "dataflex: %s; keeping the current mixture for step %d (dataflex.on_invalid=uniform)", exc, step
            )
            return {"dataflex/active": 1.0, "dataflex/uniform_fallback": 1.0}

    def _init_dataloader(self) -> None:
        super()._init_dataloader()
        if self.dataflex.mix is not None:
            self.dataflex_sampler = dataflex_mix.install_sampler(self)

    def _dataflex_write(
        self, meta: KVBatchMeta, values: dict[str, torch.Tensor], read: queue_io.QueueBatch
    ) -> KVBatchMeta:
        """Fallback only: write ``values`` (``rollout_is_weights``, maybe advantages) in one put; the meta to return."""
        return queue_io.write_response_fields(meta, values, read)

    def _dataflex_step_metrics(
        self,
        factor: torch.Tensor | None,
        written: torch.Tensor | None,
        valid_tokens: torch.Tensor,
        verl_weights: torch.Tensor | None,
        start: float,
        *,
        fallback: bool,
    ) -> dict[str, float]:
        out = {}
        if factor is not None:
            out = dataflex_metrics.weight_metrics(
                factor, valid_tokens, self.dataflex.loss_unit, written=written, verl_weights=verl_weights
            )
        out["dataflex/active"] = 1.0
        out["dataflex/uniform_fallback"] = 1.0 if fallback else 0.0
        out["dataflex/uniform_fallback_total"] = float(self.dataflex_uniform_fallbacks)
        out["dataflex/hook_time_s"] = time.perf_counter() - start
        return out
