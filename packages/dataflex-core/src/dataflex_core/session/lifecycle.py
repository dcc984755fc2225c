"""DataFlex inside one training run: the one object a host creates and calls at its framework's seams.

Every host runs the same lifecycle; only the framework's I/O differs. A host
creates a :class:`DataFlexSession` from its ``dataflex:`` block and calls it,
in this order:

1. ``DataFlexSession(block)`` in its constructor, first: pins the plugin set
   (with ``dataflex.plugins.lock`` only locked plugins are imported, and any
   drift stops the run here);
2. :meth:`~DataFlexSession.mount` with its :class:`~dataflex_core.step.HostCapabilities`
   (the seams it provides among them), loss unit and context: builds and
   checks the pipeline before the first rollout (a seam the mechanism needs
   and the host lacks is refused with the host's reason; the components'
   state is checked through the checkpoint format);
3. :meth:`~DataFlexSession.train_sampler` where the framework builds its
   train dataloader: the sampler of a mechanism that draws the prompts (mix,
   curriculum), or ``None`` to keep the framework's;
3b. at the seams it declared, what :meth:`~DataFlexSession.seam` hands it:
   the mounted mechanism's implementation of a seam (generation rounds within
   a step, per-prompt rollout counts, ...), or ``None``: a host tests for a
   seam, never for a mechanism's name;
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
seams, field names, padding and capabilities. It is the running step itself
(:class:`~dataflex_core.runner.DataFlexStep`: ``session.run``, ``session.seam``,
``session.pipeline``, ...), with the plugin pinning, the train sampler and the
component state around it; the block is read once, when the session is made.

The package (:mod:`dataflex_core.session`) is the one import a host needs: the
session and what a host declares and receives.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from typing import Any

from ..block import read_block
from ..errors import IncompatibleComponentError
from ..ledger import PromptLedger
from ..lock.pinning import (
    CHECKPOINT_PLUGIN_SET,
    ResolvedPlugins,
    check_plugin_record,
    resolve_plugins,
    save_plugin_record,
)
from ..runner.run import DataFlexStep
from ..step.dataset import TrainDataset
from ..step.fields import is_canonical
from ..step.host import HostCapabilities
from ..step.seams import TrainSampler
from ..step.state import (
    CHECKPOINT_STATE,
    ComponentStateError,
    SavedState,
    Stateful,
    check_component_state,
    encode_component_state,
    read_component_state,
    restore_component_state,
    write_component_state,
)
from ..step.state_checks import FRESH_START_SETTING

logger = logging.getLogger("dataflex_core.session")


def missing_state_files(folder: str | os.PathLike[str]) -> list[str]:
    """The DataFlex files every DataFlex save writes that ``folder`` lacks (a host names an earlier checkpoint)."""
    return [
        name for name in (CHECKPOINT_PLUGIN_SET, CHECKPOINT_STATE) if not os.path.exists(os.path.join(folder, name))
    ]


class DataFlexSession(DataFlexStep):
    """One host run's DataFlex: the plugin pinning, then the mounted step run each training step, the train
    sampler, component state, metrics.

    :param block: the run's ``dataflex:`` block (a mapping or an OmegaConf node; ``None`` pins the plugin set
        from the environment only, and the host refuses the missing block with its own message). It is read
        here, once (:attr:`block`).
    """

    def __init__(self, block: Any) -> None:
        super().__init__(read_block(block))
        #: The plugin set this run uses; resolved before any component is built.
        self.plugins: ResolvedPlugins = resolve_plugins(None if self.block is None else self.block.plugins)
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
    ) -> None:
        """Build the block and check it against ``host`` (:meth:`DataFlexStep.mount
        <dataflex_core.runner.DataFlexStep.mount>`); the components' state is checked through the checkpoint
        format. Then the session runs the step: :meth:`seam`, :meth:`run`, :attr:`pipeline`, :attr:`fields`, ...
        """
        super().mount(
            host, loss_unit=loss_unit, ctx=ctx, adv_estimator=adv_estimator, is_group_estimator=is_group_estimator,
            extra_keys=extra_keys,
        )  # fmt: skip
        check_component_state(self.stateful(), self.state_labels())

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
        """Hand over the train dataset where the framework builds its train dataloader: the sampler to draw the
        prompts with when the mounted mechanism draws them (the :class:`~dataflex_core.step.seams.TrainSampler`
        seam), else ``None`` (keep yours). A mechanism that keeps a per-prompt ledger keys it by this dataset.

        :param dataset: the train dataset's columns; :param batch_size: prompts per batch (one step's);
        :param seed: the run's data seed.
        """
        sampler = self.mechanism.train_sampler(self, dataset, batch_size, seed)
        if sampler is not None:
            self.sampler = sampler
            drawn = self.seam(TrainSampler)
            if drawn is not None:
                drawn.sampler = sampler
        return sampler

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
            "compute": self.compute_totals,
        }

    def state_labels(self) -> dict[str, str]:
        """How state errors name each component: ``name (dist==version)``."""
        pipeline = self.pipeline
        return {
            "scorer": pipeline.scorer_spec.label,
            "actuator": pipeline.actuator_spec.label,
            **self.mechanism.state_labels(),
        }

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

    @property
    def ledger(self) -> PromptLedger | None:
        """The per-prompt ledger the mechanism feeds (``None`` for one without, or before the train sampler)."""
        return self.mechanism.ledger(self.sampler)

    def export_ledger(self, path: str | os.PathLike[str]) -> bool:
        """Write the ledger to ``path`` as Parquet (:meth:`~dataflex_core.ledger.PromptLedger.export`), for
        ``dataflex.ledger.load`` of a later run or offline analysis; False when the mechanism keeps none.

        Checkpoints hold the ledger once, in the component state (``dataflex.ledger.load`` takes a checkpoint
        folder too); this is the explicit export, e.g. to ``dataflex_ledger.parquet``.
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
        """Before the framework loads anything from ``folder``: refuse a checkpoint without DataFlex's files (unless
        ``dataflex.plugins.allow_missing_state``), refuse another plugin set, and read and check the component
        state (an unreadable file stops the resume here, in one line naming it).

        Every DataFlex save writes both files, so a checkpoint without them was written before DataFlex was added,
        or the process stopped between the framework's save and DataFlex's: resuming it silently would skip the
        plugin-set check and start every component (a curriculum's ledger, a sampler's pass) from nothing.
        """
        missing = missing_state_files(folder)
        if missing and not self.plugins.settings.allow_missing_state:
            raise ComponentStateError(
                f"checkpoint {os.fspath(folder)} has no {' or '.join(missing)}: it was written without DataFlex's "
                "checkpointing, or the process stopped between the framework's save and DataFlex's files; resume "
                f"from an earlier checkpoint that has them, or set {FRESH_START_SETTING} to resume it with the "
                "plugin set unchecked and every dataflex component fresh"
            )
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
