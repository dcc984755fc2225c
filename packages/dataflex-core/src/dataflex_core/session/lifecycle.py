"""DataFlex inside one training run: the one object a host creates and calls at its framework's seams.

Every host runs the same lifecycle; only the framework's I/O differs. A host
creates a :class:`DataFlexSession` from its ``dataflex:`` block and calls it,
in this order:

1. ``DataFlexSession(block)`` in its constructor, first: pins the plugin set
   (with ``dataflex.plugins.lock`` only locked plugins are imported, and any
   drift stops the run here);
2. :meth:`~DataFlexSession.mount` with its :class:`~dataflex_core.step.HostCapabilities`,
   loss unit and context: builds and checks the pipeline before the first
   rollout (the mechanism's requirements, the recompute-advantage decision,
   the components' state through the checkpoint format);
3. :meth:`~DataFlexSession.train_sampler` where the framework builds its
   train dataloader: the sampler of a mechanism that draws the prompts (mix,
   curriculum), or ``None`` to keep the framework's;
4. each training step: :meth:`~DataFlexSession.idle` (skip the host's own
   I/O before ``warmup_step``), then :meth:`~DataFlexSession.run` on the
   step's batch in the canonical fields; the host applies the
   :class:`~dataflex_core.step.StepResult` (weights into its loss, recomputed
   advantages, a hard drop); a host with several processes runs it where
   :attr:`~dataflex_core.mechanisms.Mechanism.runs_on_every_process` says and
   passes :meth:`~DataFlexSession.shared_state` on;
5. checkpoints: :meth:`~DataFlexSession.encode_state` before the framework
   writes anything (a state that cannot be saved stops the save there, naming
   the component) and :meth:`~DataFlexSession.write_state` into the
   framework's checkpoint folder where a failure leaves no checkpoint the
   framework would resume from (:meth:`~DataFlexSession.save` does both at
   once); :meth:`~DataFlexSession.check_resume` before the framework loads
   anything from a resumed folder (the plugin set, and the state file read and
   checked); :meth:`~DataFlexSession.restore` after it has.

The session is what the BaseInstrumentor of OpenTelemetry is to an
instrumentation: the lifecycle lives here once, a host is the framework's
seams, field names, padding and capabilities.

This module is the one a host imports: besides the session it exports what a
host declares and receives (:data:`__all__`: ``HostCapabilities``,
``FieldSupport``, the loss units, ``StepResult``, ``TrainDataset``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from ..block import dataflex_block
from ..config import DataFlexPipeline
from ..errors import IncompatibleComponentError
from ..ledger import CHECKPOINT_LEDGER, PromptLedger
from ..lock.pinning import ResolvedPlugins, check_plugin_record, resolve_plugins, save_plugin_record
from ..mechanisms.allocate import Allocate
from ..mechanisms.base import Mechanism
from ..mechanisms.filter import DRAW_INHERITS, AdmissionRounds, Filter, RefillSampler
from ..precomputed import prepare_batch
from ..runner.mount import MountedStep, mount_step
from ..runner.run import DataFlexStep
from ..step.blocks import BlockSampler
from ..step.dataset import TrainDataset, dataset_column
from ..step.fields import is_canonical
from ..step.host import FieldSupport, HostCapabilities
from ..step.result import StepResult
from ..step.state import (
    SavedState,
    Stateful,
    check_component_state,
    encode_component_state,
    read_component_state,
    restore_component_state,
    write_component_state,
)
from ..step.weights import LOSS_UNITS, SEQUENCE_UNIT, TOKEN_UNIT

#: What a host needs from the core, in one import.
__all__ = [
    "LOSS_UNITS",
    "SEQUENCE_UNIT",
    "TOKEN_UNIT",
    "DataFlexSession",
    "FieldSupport",
    "HostCapabilities",
    "StepResult",
    "TrainDataset",
    "dataset_column",
]

logger = logging.getLogger("dataflex_core.session")


class DataFlexSession:
    """One host run's DataFlex: plugin pinning, the mounted step, the train sampler, component state, metrics.

    :param block: the run's ``dataflex:`` block (a mapping or an OmegaConf node; ``None`` pins the plugin set
        from the environment only, and the host refuses the missing block with its own message).
    """

    def __init__(self, block: Any) -> None:
        self.block = block
        #: The plugin set this run uses; resolved before any component is built.
        self.plugins: ResolvedPlugins = resolve_plugins(block)
        self._step: DataFlexStep | None = None
        #: mechanism filter: the sampler of refill rounds, once the host asked for it.
        self._refill: RefillSampler | None = None
        #: The resumed folder and the state read from it by :meth:`check_resume`, for :meth:`restore`.
        self._resumed: tuple[str, SavedState | None] | None = None

    # -- mount -----------------------------------------------------------------------------------
    def mount(
        self,
        host: HostCapabilities,
        *,
        loss_unit: str,
        ctx: Mapping[str, Any] | None = None,
        adv_estimator: str | None = None,
        is_group_estimator: Any = None,
        extra_keys: Iterable[str] = (),
    ) -> MountedStep:
        """Build the block and check it against ``host`` (see :func:`~dataflex_core.step.mount_step`)."""

        def mount_block(block: Mapping[str, Any]) -> MountedStep:
            return mount_step(
                block,
                host,
                loss_unit=loss_unit,
                ctx=ctx,
                adv_estimator=adv_estimator,
                is_group_estimator=is_group_estimator,
                extra_keys=extra_keys,
            )

        mounted = mount_block(self.block)
        self._step = DataFlexStep(mounted)
        mechanism = mounted.mechanism
        if isinstance(mechanism, Filter) and mechanism.settings.draw is not None:
            # filter.draw: the mix or curriculum that draws the prompts, mounted against the same host
            inherited = {key: value for key, value in dataflex_block(self.block).items() if key in DRAW_INHERITS}
            draw = DataFlexStep(mount_block({**inherited, **mechanism.settings.draw}))
            mechanism.draw = draw
            mounted.fields = list(dict.fromkeys([*mounted.fields, *draw.mounted.fields]))
        pipeline = mounted.pipeline
        roles = {"scorer": pipeline.scorer, "actuator": pipeline.actuator}
        if isinstance(mechanism, Filter) and mechanism.draw is not None:
            roles.update(draw_scorer=mechanism.draw.pipeline.scorer, draw_actuator=mechanism.draw.pipeline.actuator)
        check_component_state(roles, self.state_labels())
        return mounted

    @property
    def step(self) -> DataFlexStep:
        if self._step is None:
            raise RuntimeError("the DataFlex session is not mounted yet: call DataFlexSession.mount(host, ...) first")
        return self._step

    @property
    def mounted(self) -> MountedStep:
        return self.step.mounted

    @property
    def pipeline(self) -> DataFlexPipeline:
        return self.mounted.pipeline

    @property
    def mechanism(self) -> Mechanism:
        return self.mounted.mechanism

    @property
    def host(self) -> HostCapabilities:
        return self.mounted.host

    @property
    def fields(self) -> list[str]:
        """The canonical fields and dataset columns the step reads each time."""
        return self.mounted.fields

    @property
    def loss_unit(self) -> str:
        return self.mounted.loss_unit

    @property
    def ctx(self) -> dict[str, Any]:
        return self.mounted.ctx

    @property
    def recompute_advantage(self) -> bool:
        """The host recomputes group advantages on a selector's kept rows (read its estimator's fields too)."""
        return self.mounted.recompute_advantage

    def describe(self) -> str:
        draw = self._draw_step
        return self.mounted.describe() + ("" if draw is None else f"; prompts drawn by {draw.mounted.describe()}")

    @property
    def _draw_step(self) -> DataFlexStep | None:
        """``filter.draw``: the step of the mix or curriculum that draws the prompts."""
        mechanism = self.mechanism
        return mechanism.draw if isinstance(mechanism, Filter) else None

    @property
    def refills_from_train_sampler(self) -> bool:
        """``filter.draw``: refill prompts come from the train sampler the draw mechanism drives."""
        return self._draw_step is not None

    def dataset_columns(self) -> list[str]:
        """The dataset columns (names outside the canonical fields) the step or the train sampler reads."""
        wanted = [name for name in self.fields if not is_canonical(name)]
        return wanted + [name for name in self.mechanism.dataset_columns(self.pipeline) if name not in wanted]

    def check_dataset_columns(self, columns: list[str] | None) -> None:
        """Every dataset column the step or the train sampler reads is one of ``columns`` (``None``: unknown)."""
        wanted = self.dataset_columns()
        if not wanted or columns is None:
            return
        missing = [name for name in wanted if name not in columns]
        if missing:
            raise IncompatibleComponentError(
                f"dataflex reads the dataset column(s) {missing}, but the train dataset has columns {columns}; add "
                "them to the dataset (one value per prompt) or configure components that do not read them"
            )

    # -- the train sampler ---------------------------------------------------------------------------
    def train_sampler(self, dataset: TrainDataset, *, batch_size: int, seed: int) -> Any:
        """The sampler of a mechanism that draws the prompts, for the host's train dataloader (``None``: keep yours).

        :param dataset: the train dataset's columns; :param batch_size: prompts per batch (one step's);
        :param seed: the run's data seed.
        """
        sampler = self.mechanism.train_sampler(self.step, dataset, batch_size, seed)
        if sampler is not None:
            self.step.sampler = sampler
        return sampler

    @property
    def sampler(self) -> Any:
        """The train sampler the mechanism drives (``None`` until built, or for reweight and select)."""
        return self.step.sampler

    # -- each step ------------------------------------------------------------------------------------
    def idle(self, step: int) -> dict[str, float] | None:
        """The metrics to log for a step that does nothing (before ``warmup_step``); ``None`` when it runs."""
        return self.step.idle(step)

    def run(
        self,
        batch: Any,
        step: int,
        *,
        importance_weights: torch.Tensor | None = None,
        start: float | None = None,
        advantages: torch.Tensor | None = None,
        admission: AdmissionRounds | None = None,
    ) -> StepResult:
        """The step on ``batch`` (see :meth:`~dataflex_core.step.DataFlexStep.run`); its metrics include the
        ``dataflex/compute/*`` counters."""
        return self.step.run(
            batch, step, importance_weights=importance_weights, start=start, advantages=advantages, admission=admission
        )

    # -- mechanism filter's generation rounds ----------------------------------------------------
    def admission(self, groups: int) -> AdmissionRounds:
        """A step's admission rounds (``mechanism: filter``) for a trained batch of ``groups`` groups.

        The host generates a prompt batch, calls :meth:`admit` on it, and while
        :attr:`~dataflex_core.mechanisms.filter.AdmissionRounds.needs_refill` generates the next one from
        :meth:`refill_sampler`; then it builds the trained batch from ``rounds.chosen()`` and calls :meth:`run`
        on it with ``admission=rounds``.
        """
        return self._filter().rounds(groups)

    def admit(self, rounds: AdmissionRounds, batch: Any, step: int) -> torch.Tensor:
        """Admit one round's groups into ``rounds``; the admitted flag of each group (sorted ``uid`` order)."""
        prepare_batch(batch)
        mechanism = self._filter()
        admitted, rollouts, tokens = mechanism.admit(self.step, batch, step)
        rounds.add(admitted, rollouts, tokens, mechanism.round_prompts(self.step, batch))
        return admitted

    def refill_sampler(self, population: int, *, batch_size: int, seed: int) -> BlockSampler:
        """The sampler of refill rounds (built once; its position travels with the component state): with
        ``filter.draw`` the train sampler the mix or curriculum drives, so refills are drawn as the dataloader's
        prompts are."""
        self._filter()
        if self.refills_from_train_sampler:
            if self.sampler is None:
                raise RuntimeError(
                    "filter.draw refills from the train sampler, but the host has not built it yet "
                    "(DataFlexSession.train_sampler)"
                )
            return self.sampler
        if self._refill is None:
            self._refill = RefillSampler(population, batch_size, seed)
        return self._refill

    def _filter(self) -> Filter:
        mechanism = self.mechanism
        if not isinstance(mechanism, Filter):
            raise RuntimeError(f"admission rounds belong to mechanism filter, not {mechanism.name!r}")
        return mechanism

    # -- mechanism allocate's rollout counts ----------------------------------------------------------
    def allocate(
        self, prompt_ids: Sequence[Any], step: int, *, rollout_n: int, uids: Sequence[Any] | None = None
    ) -> torch.Tensor:
        """The rollouts of each prompt of a batch about to be rolled out (``mechanism: allocate``), int64 ``(n,)``.

        The host generates exactly ``counts[i]`` rollouts for ``prompt_ids[i]`` (its ``dataflex.prompt_key``
        value) and passes each prompt's group id as ``uids``, so :meth:`run` checks what came back;
        ``rollout_n`` is the framework's uniform count (the default budget is ``len(prompt_ids) * rollout_n``).
        """
        mechanism = self.mechanism
        if not isinstance(mechanism, Allocate):
            raise RuntimeError(f"rollout counts belong to mechanism allocate, not {mechanism.name!r}")
        return mechanism.allocate(self.step, prompt_ids, step, rollout_n=rollout_n, uids=uids)

    def count(
        self,
        response_mask: torch.Tensor,
        advantages: torch.Tensor | None = None,
        *,
        is_padding: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """The ``dataflex/compute/*`` counters of a step the host does not :meth:`run` (before ``warmup_step``),
        so the totals count every rollout of the run."""
        return self.step.count(response_mask, advantages, is_padding=is_padding)

    def shared_state(self) -> Any:
        """What the main process of a host with several processes hands the others after :meth:`run`."""
        return self.mechanism.shared_state(self.sampler)

    def load_shared_state(self, state: Any) -> None:
        """On the other processes: take :meth:`shared_state` of the main one."""
        self.mechanism.load_shared_state(self.sampler, state)

    # -- component state in checkpoints -------------------------------------------------------------------
    def stateful(self) -> dict[str, Stateful]:
        """What travels with checkpoints, by role: the components, and what the mechanism keeps (a history)."""
        pipeline = self.pipeline
        return {
            "scorer": pipeline.scorer,
            "actuator": pipeline.actuator,
            **self.mechanism.stateful(self.sampler),
            **({"refill": self._refill} if self._refill is not None else {}),
            "compute": self.step.compute_totals,
        }

    def state_labels(self) -> dict[str, str]:
        """How state errors name each component: ``name (dist==version)``."""
        pipeline = self.pipeline
        labels = {"scorer": pipeline.scorer_spec.label, "actuator": pipeline.actuator_spec.label}
        draw = self._draw_step
        if draw is not None:
            labels.update(draw_scorer=draw.pipeline.scorer_spec.label, draw_actuator=draw.pipeline.actuator_spec.label)
        return labels

    def encode_state(self, global_steps: int) -> bytes:
        """The component state of this step as the bytes of its file; call before the framework writes anything.

        :raises ComponentStateError: a component's state cannot be saved (named, with its distribution).
        """
        return encode_component_state(self.stateful(), global_steps, self.state_labels())

    def write_state(self, folder: str | os.PathLike[str], data: bytes) -> None:
        """Write the plugin set and the encoded component state into the checkpoint ``folder`` (atomically each).

        The host calls it where a failure here leaves no checkpoint the framework would resume from: before the
        framework marks the checkpoint complete (verl's tracker file), or after the framework's own files in a
        folder the host removes from the framework's view when this raises (TRL).
        """
        save_plugin_record(folder, self.plugins)
        write_component_state(folder, data)
        self.export_ledger(os.path.join(os.fspath(folder), CHECKPOINT_LEDGER))

    @property
    def ledger(self) -> PromptLedger | None:
        """The per-prompt ledger the mechanism feeds (``None`` for one without, or before the train sampler)."""
        return self.mechanism.ledger(self.sampler)

    def export_ledger(self, path: str | os.PathLike[str]) -> bool:
        """Write the ledger to ``path`` in its file format (:meth:`~dataflex_core.ledger.PromptLedger.export`),
        for ``dataflex.ledger.load`` of a later run; False when the mechanism keeps none.

        Each checkpoint folder gets one (``dataflex_ledger.jsonl``) when the state is written.
        """
        ledger = self.ledger
        if ledger is None:
            return False
        ledger.export(path)
        return True

    def save(self, folder: str | os.PathLike[str], global_steps: int) -> None:
        """:meth:`encode_state` then :meth:`write_state`, for a host that writes before the framework does."""
        self.write_state(folder, self.encode_state(global_steps))

    def check_resume(self, folder: str | os.PathLike[str]) -> None:
        """Before the framework loads anything from ``folder``: refuse another plugin set, and read and check the
        component state (an unreadable file stops the resume here, in one line naming it)."""
        check_plugin_record(folder, self.plugins)
        self._resumed = (os.fspath(folder), read_component_state(folder))

    def restore(self, folder: str | os.PathLike[str]) -> None:
        """Give each component (and the mechanism's state) what ``folder`` saved; call after the framework's load."""
        resumed = self._resumed
        saved = resumed[1] if resumed is not None and resumed[0] == os.fspath(folder) else read_component_state(folder)
        self._resumed = None
        restore_component_state(saved, self.stateful(), folder)
        self.mechanism.restored(self.sampler, self.host)
        logger.info("dataflex state restored from %s", folder)
