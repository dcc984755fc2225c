"""DataFlex inside one training run: the one object a host creates and calls at its framework's seams.

Every host runs the same lifecycle (the order of the calls is in docs/architecture.md); only the framework's I/O
differs, so it lives here once and a host is the framework's seams, names and padding.
"""

from __future__ import annotations

import logging
import os
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
    """One host run's DataFlex: the plugin pinning, the mounted step, the train sampler, component state.

    :param block: the run's ``dataflex:`` block (a mapping or an OmegaConf node; ``None`` pins the plugin set from the
        environment only, and the host refuses the missing block with its own message).
    """

    def __init__(self, block: Any) -> None:
        super().__init__(read_block(block))
        self.plugins: ResolvedPlugins = resolve_plugins(None if self.block is None else self.block.plugins)
        self._resumed: tuple[str, SavedState | None] | None = None

    def mount(self, host: HostCapabilities, **options: Any) -> None:
        """:meth:`DataFlexStep.mount <dataflex_core.runner.DataFlexStep.mount>` (same keywords), then the components'
        state is checked through the checkpoint format, so one that cannot be saved fails now."""
        super().mount(host, **options)
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

    def train_sampler(self, dataset: TrainDataset, *, batch_size: int, seed: int) -> Any:
        """The sampler to draw the prompts with when the mounted mechanism draws them, else ``None`` (keep yours). A
        mechanism that keeps a per-prompt ledger keys it by ``dataset``."""
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
        """The component state as the bytes of its file; a state that cannot be saved raises
        :class:`ComponentStateError` here, before the framework writes anything."""
        return encode_component_state(self.stateful(), global_steps, self.state_labels())

    def write_state(self, folder: str | os.PathLike[str], data: bytes) -> None:
        """Write the plugin set and the encoded component state into the checkpoint ``folder`` (atomically each), where
        a failure leaves no checkpoint the framework would resume from (before verl's tracker file)."""
        save_plugin_record(folder, self.plugins)
        write_component_state(folder, data)

    @property
    def ledger(self) -> PromptLedger | None:
        """The per-prompt ledger the mechanism feeds (``None`` for one without, or before the train sampler)."""
        return self.mechanism.ledger(self.sampler)

    def export_ledger(self, path: str | os.PathLike[str]) -> bool:
        """Write the ledger to ``path`` as Parquet, for ``dataflex.ledger.load`` of a later run or offline analysis;
        False when the mechanism keeps none."""
        ledger = self.ledger
        if ledger is None:
            return False
        ledger.export(path)
        return True

    def save(self, folder: str | os.PathLike[str], global_steps: int) -> None:
        """:meth:`encode_state` then :meth:`write_state`, for a host that writes before the framework does."""
        self.write_state(folder, self.encode_state(global_steps))

    def check_resume(self, folder: str | os.PathLike[str]) -> None:
        """Before the framework loads anything from ``folder``: refuse another plugin set, check the component state,
        and refuse a checkpoint without DataFlex's files (unless ``dataflex.plugins.allow_missing_state``), which
        would start every component from nothing unchecked."""
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
