"""DataFlex state in TRL checkpoints: where transformers writes and resumes, and the mixin that hooks both.

TRL (through transformers' ``Trainer``) writes ``checkpoint-N/`` in
``_save_checkpoint`` and, on ``train(resume_from_checkpoint=...)``, restores
the optimizer in ``_load_optimizer_and_scheduler`` (TRL restores its own
entropy controller there too). transformers picks the newest ``checkpoint-N``
folder by its name alone, so a save must never leave one without DataFlex's
state: the component state is encoded (and proven to load back) *before* the
trainer writes anything, so a state that cannot be saved stops the save with
no ``checkpoint-N`` on disk, naming the component; the session's files (plugin
set, component state) are written into the folder *after* the trainer's own,
and if that write fails the folder is renamed out of transformers' view
(``checkpoint-N.incomplete``) before the error propagates. The recorded plugin set is checked before any
training state is loaded, and the components get their state back with the
optimizer's. Components run on the main process, whose state is the one saved.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from dataflex_core import ConfigError
from dataflex_core.session import DataFlexSession

logger = logging.getLogger("dataflex_trl")

#: Suffix of a checkpoint folder whose DataFlex files could not be written (transformers no longer sees it).
INCOMPLETE_SUFFIX = ".incomplete"


def resume_folder(resume_from_checkpoint: Any, output_dir: str) -> str | None:
    """The checkpoint folder ``Trainer.train`` resumes from (``True``: the last one in ``output_dir``)."""
    if resume_from_checkpoint is None or resume_from_checkpoint is False:
        return None
    if resume_from_checkpoint is True:
        folder = get_last_checkpoint(output_dir)
        if folder is None:
            raise ConfigError(f"resume_from_checkpoint=True, but {output_dir!r} holds no checkpoint-N folder")
        return folder
    return str(resume_from_checkpoint)


class DataFlexCheckpointMixin:
    """Saves and restores the session's state with TRL's checkpoints (expects ``self.dataflex``, the session)."""

    dataflex: DataFlexSession

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        should_save = self.args.should_save  # type: ignore[attr-defined]
        # before the trainer writes: a state that cannot be saved leaves no checkpoint-N behind
        state = self.dataflex.encode_state(self.state.global_step) if should_save else None  # type: ignore[attr-defined]
        super()._save_checkpoint(model, trial)  # type: ignore[misc]
        if state is None:
            return
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"  # type: ignore[attr-defined]
        folder = os.path.join(self._get_output_dir(trial=trial), name)  # type: ignore[attr-defined]
        try:
            self.dataflex.write_state(folder, state)
        except BaseException:
            incomplete, n = folder + INCOMPLETE_SUFFIX, 1
            while os.path.exists(incomplete):
                n += 1
                incomplete = f"{folder}{INCOMPLETE_SUFFIX}{n}"
            os.replace(folder, incomplete)
            logger.error("dataflex could not save its state into %s; moved it to %s", folder, incomplete)
            raise

    def train(self, resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any) -> Any:
        folder = resume_folder(resume_from_checkpoint, self.args.output_dir)  # type: ignore[attr-defined]
        if folder is not None:
            self.dataflex.check_resume(folder)
        return super().train(resume_from_checkpoint, *args, **kwargs)  # type: ignore[misc]

    def _load_optimizer_and_scheduler(self, checkpoint: Any) -> None:
        super()._load_optimizer_and_scheduler(checkpoint)  # type: ignore[misc]
        if checkpoint is not None:
            self.dataflex.restore(checkpoint)
