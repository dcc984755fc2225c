"""DataFlex on verl's legacy trainer line (``trainer.use_v1=false``): ``RayPPOTrainer`` at ``compute_advantage``.

The one seam that is the same on verl 0.9.1 and on its ``neo`` line is the
module function ``compute_advantage(data: DataProto, ...)``: ``RayPPOTrainer.fit``
calls it by its module global in ``verl.trainer.ppo.ray_trainer``, and the
separated trainers (one-step-off, fully-async) call the name they imported
into ``verl.experimental.separation.ray_trainer``. :func:`install_seam` wraps
it in a module; the wrapper runs verl's function, then, only while a DataFlex
trainer's ``fit`` runs in this context (:data:`_active`), the session's step on
the batch verl returned. Everywhere else it is verl's function.

The trainer side is :class:`DataFlexLegacyMixin`: it mounts the session in the
constructor (when the config asks for DataFlex on this line), draws prompts
through the session's train sampler (mix, curriculum), runs the generation rounds of a
mechanism that needs them (``filter``) where fit pulls its prompts (:mod:`dataflex_verl.legacy_rounds`), and there the
stages of one that generates a step in stages (``pilot``, :mod:`dataflex_verl.legacy_stages`), saves and restores
component state with verl's checkpoints, and hands DataFlex's metrics to
verl's step metrics with the actor's output. All ``DataProto`` access is
:mod:`dataflex_verl.dataproto_io`; what both lines share is :mod:`dataflex_verl.adapter`.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import time
from collections.abc import Iterator
from typing import Any

from dataflex_core.session import DataFlexSession, GenerationRounds, StagedGeneration

from . import adapter, dataproto_io, legacy_rounds, legacy_stages
from .checkpoint import DataFlexCheckpointMixin
from .lines import trainer_line
from .mount import field_hints, mount, scales_advantages
from .sampling import VerlTrainDataset, data_seed
from .version import __version__

logger = logging.getLogger("dataflex_verl")

#: The modules whose ``compute_advantage`` global verl's legacy-line trainers call.
SEAM_MODULES = ("verl.trainer.ppo.ray_trainer", "verl.experimental.separation.ray_trainer")

#: The DataFlex trainer whose ``fit`` runs in this context (``None``: verl's own trainers, untouched).
_active: contextvars.ContextVar[DataFlexLegacyMixin | None] = contextvars.ContextVar("dataflex_legacy", default=None)


def install_seam(module: Any) -> None:
    """Wrap ``module.compute_advantage`` (once) so that an active DataFlex trainer runs its step after verl's."""
    original = module.compute_advantage
    if getattr(original, "dataflex_seam", False):
        return

    @functools.wraps(original)
    def compute_advantage(data: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(data, *args, **kwargs)
        trainer = _active.get()
        if trainer is None:
            return out
        return trainer._dataflex_after_advantage(out, lambda sub: original(sub, *args, **kwargs))

    compute_advantage.dataflex_seam = True  # type: ignore[attr-defined]
    module.compute_advantage = compute_advantage


def refuse_in_separated_trainers(module: Any) -> None:
    """Make ``module.SeparateRayPPOTrainer`` refuse a ``dataflex:`` block in a subclass DataFlex does not drive (once).

    DataFlex runs in verl's one-step-off trainer (:mod:`dataflex_verl.one_step_off`); another separated trainer
    that calls ``SeparateRayPPOTrainer.__init__`` would ignore the block. (verl's fully-async trainer does not
    call it: its config is refused by :func:`dataflex_verl.lines.trainer_line`.)
    """
    cls = module.SeparateRayPPOTrainer
    original = cls.__init__
    if getattr(original, "dataflex_refuses", False):
        return

    @functools.wraps(original)
    def __init__(self: Any, config: Any, *args: Any, **kwargs: Any) -> None:
        if not isinstance(self, DataFlexLegacyMixin) and config.get("dataflex", None) is not None:
            from dataflex_core import ConfigError

            raise ConfigError(
                f"{type(self).__name__} (a separated trainer) does not run DataFlex in "
                f"dataflex-verl {__version__}: the dataflex: block would be ignored. Run verl's one-step-off "
                "trainer (python -m verl.experimental.one_step_off_policy.main_ppo), its RayPPOTrainer "
                "(python -m verl.trainer.main_ppo trainer.use_v1=false) or a V1 trainer mode "
                "(trainer.v1.trainer_mode=dataflex_separate_async), or remove the dataflex: block"
            )
        original(self, config, *args, **kwargs)

    __init__.dataflex_refuses = True  # type: ignore[attr-defined]
    cls.__init__ = __init__


@contextlib.contextmanager
def running(trainer: DataFlexLegacyMixin) -> Iterator[None]:
    """While inside, ``compute_advantage`` in this context runs ``trainer``'s step (if it mounted DataFlex)."""
    token = _active.set(trainer if trainer.dataflex is not None else None)
    try:
        yield
    finally:
        _active.reset(token)


class DataFlexLegacyMixin(DataFlexCheckpointMixin):
    """Adds DataFlex to a legacy-line verl trainer (``class T(DataFlexLegacyMixin, RayPPOTrainer)``).

    Without a ``dataflex:`` block the trainer is verl's, unchanged (``self.dataflex`` is ``None``).
    """

    def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
        #: the session (plugin set, mounted step, train sampler, component state); None without DataFlex
        self.dataflex: DataFlexSession | None = None
        #: DataFlex's metrics of the step, handed to verl's with the actor's output
        self.dataflex_metrics: dict[str, float] = {}
        self.dataflex_scales_advantages = False
        #: the generation rounds or stages that built this step's batch (legacy_rounds, legacy_stages), if any
        self.dataflex_generation: Any = None
        if trainer_line(config) == "legacy":
            self.dataflex = mount(config, "legacy")
            self.dataflex_field_hints = field_hints(self.dataflex.host)
            #: the configured loss ignores rollout_is_weights: the weights go into the advantages
            self.dataflex_scales_advantages = scales_advantages(config, "legacy")
            logger.info(
                "dataflex-verl %s mounted on %s: %s", __version__, type(self).__name__, self.dataflex.describe()
            )
        super().__init__(config, *args, **kwargs)

    def fit(self) -> Any:
        with running(self), legacy_rounds.installed(self), legacy_stages.installed(self):
            return super().fit()  # type: ignore[misc]

    # -- the step, at compute_advantage ----------------------------------------------------------
    def _dataflex_after_advantage(self, data: Any, estimate: Any) -> Any:
        """The session's step on verl's batch ``data`` (advantages computed); the weights written into it.

        :param estimate: verl's ``compute_advantage`` with this step's settings, for a recomputation.
        """
        assert self.dataflex is not None
        step = int(getattr(self, "global_steps", 0) or 0)
        idle = self.dataflex.idle(step)
        if idle is not None:  # before warmup_step: verl's step as it is, counted only
            self.dataflex_metrics.update(idle)
            counted = dataproto_io.read_batch(data, ["advantages"]).batch
            padding = dataproto_io.padding_rows(data)
            self.dataflex_metrics.update(
                self.dataflex.count(counted["response_mask"], counted["advantages"], is_padding=padding)
            )
            return data
        start = time.perf_counter()
        # rollout correction wrote its own weights; a loss that ignores them has nothing to compose with
        verl_weights = adapter.WEIGHTS_FIELD in data.batch.keys() and not self.dataflex_scales_advantages
        fields, compose = adapter.step_fields(self.dataflex, verl_weights=verl_weights)
        # verl's advantages too: the compute counters count trained rows whose advantage is zero as wasted
        reads = list(dict.fromkeys([*fields, "advantages"]))
        read = dataproto_io.read_batch(data, reads, producers=self.dataflex_field_hints)
        generation, self.dataflex_generation = self.dataflex_generation, None
        out = adapter.step_outputs(
            self.dataflex,
            read,
            fields,
            compose=compose,
            is_padding=dataproto_io.padding_rows(data),
            step=step,
            start=start,
            recompute=lambda kept: dataproto_io.recompute_advantages(data, kept, estimate),
            metrics=self.dataflex_metrics,
            generation=generation,
        )
        if out is None:
            return data
        if self.dataflex_scales_advantages:
            weights = out.pop(adapter.WEIGHTS_FIELD)
            dataproto_io.write_fields(data, out)  # recomputed advantages first, then scaled
            dataproto_io.scale_advantages(data, weights)
        else:
            dataproto_io.write_fields(data, out)
        return data

    def _update_actor(self, batch: Any) -> Any:
        output = super()._update_actor(batch)  # type: ignore[misc]
        if self.dataflex_metrics:
            output.meta_info["metrics"].update(self.dataflex_metrics)
            self.dataflex_metrics = {}
        return output

    def _get_gen_batch(self, batch: Any) -> Any:
        """verl's generation batch; the dataset columns DataFlex reads also stay on ``batch``.

        verl's legacy ``fit`` moves every dataset column but ``data_source``, ``reward_model``,
        ``extra_info`` and ``uid`` into the generation batch, and the rollouts it gets back do not carry
        them: without this, a column such as ``domain`` (mix) or ``index`` (curriculum) would be missing
        at ``compute_advantage``.
        """
        gen_batch = super()._get_gen_batch(batch)  # type: ignore[misc]
        if self.dataflex is not None:
            dataproto_io.keep_columns(batch, gen_batch, self.dataflex.dataset_columns())
        return gen_batch

    # -- where verl draws its prompts -------------------------------------------------------------
    def _create_dataloader(self, train_dataset: Any, val_dataset: Any, collate_fn: Any, train_sampler: Any) -> None:
        super()._create_dataloader(train_dataset, val_dataset, collate_fn, train_sampler)  # type: ignore[misc]
        if self.dataflex is None:
            return
        sampler = self.dataflex.train_sampler(
            VerlTrainDataset(self.train_dataset),  # type: ignore[attr-defined]
            batch_size=self.train_dataloader.batch_size,  # type: ignore[attr-defined]
            seed=data_seed(self),
        )
        if sampler is not None:  # mix, curriculum: verl's loader, rebuilt around DataFlex's sampler
            super()._create_dataloader(self.train_dataset, self.val_dataset, collate_fn, sampler)  # type: ignore[misc,attr-defined]
        rounds = self.dataflex.seam(GenerationRounds)
        if rounds is not None:  # what the refill rounds draw from, before a resume restores its position
            prompts = self.train_dataloader.batch_size  # type: ignore[attr-defined]
            rounds.prepare(len(self.train_dataset), batch_size=prompts, seed=data_seed(self))  # type: ignore[attr-defined]
        staged = self.dataflex.seam(StagedGeneration)
        if staged is not None:  # what the stages screen beyond fit's pull, before a resume restores its position
            prompts, rows = self.train_dataloader.batch_size, len(self.train_dataset)  # type: ignore[attr-defined]
            staged.prepare(rows, batch_size=prompts, seed=data_seed(self))

    # -- checkpoints ------------------------------------------------------------------------------
    def _save_checkpoint(self) -> None:
        if self.dataflex is None:
            return super(DataFlexCheckpointMixin, self)._save_checkpoint()  # type: ignore[misc]
        return super()._save_checkpoint()

    def _load_checkpoint(self) -> None:
        if self.dataflex is None:
            return super(DataFlexCheckpointMixin, self)._load_checkpoint()  # type: ignore[misc]
        return super()._load_checkpoint()


__all__ = ["SEAM_MODULES", "DataFlexLegacyMixin", "install_seam", "running"]
