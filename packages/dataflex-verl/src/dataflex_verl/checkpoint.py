"""DataFlex state in verl checkpoints: where verl 0.9 writes and resumes, and the mixin that hooks both.

verl's v1 trainer writes ``global_step_N/`` (actor, critic, ``data.pt``) in
``_save_checkpoint`` and reads it back in ``_load_checkpoint`` (called from
``init``). The session's files (plugin set, component state) are written into
the same folder *before* verl's own: verl writes
``latest_checkpointed_iteration.txt`` last, so a save that fails anywhere
leaves no folder the tracker points at, and a folder it points at always has
them. On resume the plugin set is checked *before* verl loads the model
weights, so a mismatch fails fast, and the state is restored after verl's
load (the train sampler comes back with ``data.pt``).

Files are written on the driver's local disk next to verl's ``data.pt``;
like ``data.pt`` they are not copied to ``trainer.default_hdfs_dir``.
"""

from __future__ import annotations

import os
from typing import Any

from dataflex_core.session import DataFlexSession


def checkpoint_folder(config: Any, global_steps: int) -> str:
    """The ``global_step_N`` folder verl 0.9's ``_save_checkpoint`` writes."""
    return os.path.join(config.trainer.default_local_dir, f"global_step_{global_steps}")


def resume_folder(config: Any) -> str | None:
    """The checkpoint folder verl 0.9's ``_load_checkpoint`` will resume from, or ``None`` for a fresh start.

    Mirrors verl's resolution (``trainer.resume_mode``: ``disable``, ``auto`` via
    the tracker file, ``resume_path``) so DataFlex can check the folder before verl
    loads anything from it.
    """
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    mode = config.trainer.resume_mode
    if mode == "auto":
        return find_latest_ckpt_path(os.path.abspath(config.trainer.default_local_dir))
    if mode == "resume_path" and isinstance(config.trainer.resume_from_path, str):
        return os.path.abspath(config.trainer.resume_from_path)
    return None


class DataFlexCheckpointMixin:
    """Saves and restores the session's state with verl's checkpoints (expects ``self.dataflex``, the session)."""

    dataflex: DataFlexSession

    def _save_checkpoint(self) -> None:
        folder = checkpoint_folder(self.config, self.global_steps)  # type: ignore[attr-defined]
        self.dataflex.save(folder, self.global_steps)  # type: ignore[attr-defined]
        super()._save_checkpoint()  # type: ignore[misc]

    def _load_checkpoint(self) -> None:
        folder = resume_folder(self.config)  # type: ignore[attr-defined]
        if folder is not None:
            self.dataflex.check_resume(folder)
        super()._load_checkpoint()  # type: ignore[misc]
        if folder is not None:
            self.dataflex.restore(folder)
