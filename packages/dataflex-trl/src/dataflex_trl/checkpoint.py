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
(``incomplete-checkpoint-N``, a name transformers neither resumes nor counts under ``save_total_limit``) before
the error propagates. With ``save_total_limit`` transformers deletes older
checkpoints at the end of its save; DataFlex holds that rotation back until its files are in the new folder, so a
failed or interrupted write never leaves a run whose only checkpoints are gone. The recorded plugin set is checked before any
training state is loaded, and the components get their state back with the
optimizer's. Components run on the main process, whose state is the one saved.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from dataflex_core import ConfigError
from dataflex_core.session import DataFlexSession, missing_state_files
from dataflex_core.step.state import ComponentStateError

logger = logging.getLogger("dataflex_trl")

#: Prefix of a checkpoint folder whose DataFlex files could not be written: transformers finds checkpoints by the
#: ``checkpoint-*`` pattern (to resume and to rotate), so the folder is out of its view and never counts as one.
INCOMPLETE_PREFIX = "incomplete-"


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


def newest_with_state(output_dir: str, before: str) -> str | None:
    """The newest ``checkpoint-N`` in ``output_dir`` older than ``before`` that holds DataFlex's files."""
    found = []
    for name in os.listdir(output_dir):
        match = re.fullmatch(rf"{PREFIX_CHECKPOINT_DIR}-(\d+)", name)
        folder = os.path.join(output_dir, name)
        if match and os.path.isdir(folder) and os.path.abspath(folder) != os.path.abspath(before):
            found.append((int(match.group(1)), folder))
    for _, folder in sorted(found, reverse=True):
        if not missing_state_files(folder):
            return folder
    return None


def rotate_older_checkpoints(trainer: Any, run_dir: str) -> None:
    """transformers' own rotation under ``save_total_limit``, run once the new checkpoint holds DataFlex's files."""
    if not trainer.args.save_total_limit or trainer.args.save_total_limit <= 0:
        return
    legacy = getattr(trainer, "_rotate_checkpoints", None)  # transformers 4.x: a Trainer method
    if legacy is not None:
        legacy(use_mtime=False, output_dir=run_dir)
        return
    from transformers.trainer_utils import rotate_checkpoints  # transformers 5.x: a function

    rotate_checkpoints(
        output_dir=run_dir,
        save_total_limit=trainer.args.save_total_limit,
        best_model_checkpoint=trainer.state.best_model_checkpoint,
        use_mtime=True,
    )


class DataFlexCheckpointMixin:
    """Saves and restores the session's state with TRL's checkpoints (expects ``self.dataflex``, the session)."""

    dataflex: DataFlexSession

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        args = self.args  # type: ignore[attr-defined]
        # before the trainer writes: a state that cannot be saved leaves no checkpoint-N behind
        state = self.dataflex.encode_state(self.state.global_step) if args.should_save else None  # type: ignore[attr-defined]
        limit = args.save_total_limit
        args.save_total_limit = None  # transformers rotates at the end of its save: not before DataFlex's files
        try:
            super()._save_checkpoint(model, trial)  # type: ignore[misc]
        finally:
            args.save_total_limit = limit
        if state is None:
            return
        run_dir = self._get_output_dir(trial=trial)  # type: ignore[attr-defined]
        folder = os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")  # type: ignore[attr-defined]
        try:
            self.dataflex.write_state(folder, state)
        except BaseException:
            base = os.path.join(run_dir, INCOMPLETE_PREFIX + os.path.basename(folder))
            incomplete, n = base, 1
            while os.path.exists(incomplete):
                n += 1
                incomplete = f"{base}.{n}"
            os.replace(folder, incomplete)
            logger.error("dataflex could not save its state into %s; moved it to %s", folder, incomplete)
            raise
        rotate_older_checkpoints(self, run_dir)

    def train(self, resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any) -> Any:
        folder = resume_folder(resume_from_checkpoint, self.args.output_dir)  # type: ignore[attr-defined]
        if folder is not None:
            try:
                self.dataflex.check_resume(folder)
            except ComponentStateError as exc:
                # a checkpoint-N without DataFlex's files (a kill inside the save): name the one to resume from
                lacking = missing_state_files(folder)
                earlier = newest_with_state(os.path.dirname(folder) or ".", folder) if lacking else None
                if earlier is None:
                    raise
                raise ComponentStateError(
                    f"{exc}; the newest one with them is {earlier}: pass it as resume_from_checkpoint"
                ) from None
        return super().train(resume_from_checkpoint, *args, **kwargs)  # type: ignore[misc]

    def _load_optimizer_and_scheduler(self, checkpoint: Any) -> None:
        super()._load_optimizer_and_scheduler(checkpoint)  # type: ignore[misc]
        if checkpoint is not None:
            self.dataflex.restore(checkpoint)
