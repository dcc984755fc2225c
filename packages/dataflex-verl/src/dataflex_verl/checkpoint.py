"""DataFlex state in verl checkpoints: the plugin set and each stateful component's ``state_dict``.

verl's v1 trainer writes ``global_step_N/`` (actor, critic, ``data.pt``) in
``_save_checkpoint`` and reads it back in ``_load_checkpoint`` (called from
``init``). The mixin here wraps both: DataFlex files are written into the same
folder *before* verl writes ``latest_checkpointed_iteration.txt``, so a folder
the tracker points at always has them; on resume the plugin set is checked
*before* verl loads the model weights, so a mismatch fails fast.

Files are written on the driver's local disk next to verl's ``data.pt``;
like ``data.pt`` they are not copied to ``trainer.default_hdfs_dir``.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from dataflex_core.lock.pinning import ResolvedPlugins, check_plugin_record, save_plugin_record
from dataflex_core.step.state import Stateful, load_component_state, save_component_state

logger = logging.getLogger("dataflex_verl")


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
    """Saves and restores the DataFlex plugin set and component state with verl's checkpoints.

    Expects ``self.dataflex`` (the mounted pipeline), ``self.dataflex_plugins``
    (:class:`~dataflex_core.lock.pinning.ResolvedPlugins`) and ``self.dataflex_curriculum_sampler``
    (``None`` unless ``mechanism: curriculum``), all set in the constructor.
    """

    dataflex_plugins: ResolvedPlugins

    def _dataflex_stateful(self) -> dict[str, Stateful]:
        """What travels with checkpoints, by role: the components, and a curriculum's prompt history."""
        pipeline = self.dataflex.pipeline  # type: ignore[attr-defined]
        stateful: dict[str, Stateful] = {"scorer": pipeline.scorer, "actuator": pipeline.actuator}
        sampler = self.dataflex_curriculum_sampler  # type: ignore[attr-defined]
        if sampler is not None:
            stateful["history"] = sampler.history
        return stateful

    def _save_checkpoint(self) -> None:
        folder = checkpoint_folder(self.config, self.global_steps)  # type: ignore[attr-defined]
        save_plugin_record(folder, self.dataflex_plugins)
        save_component_state(folder, self._dataflex_stateful(), self.global_steps)  # type: ignore[attr-defined]
        super()._save_checkpoint()  # type: ignore[misc]

    def _load_checkpoint(self) -> None:
        folder = resume_folder(self.config)  # type: ignore[attr-defined]
        if folder is not None:
            check_plugin_record(folder, self.dataflex_plugins)
        super()._load_checkpoint()  # type: ignore[misc]
        if folder is not None:
            load_component_state(folder, self._dataflex_stateful())
            logger.info("dataflex state restored from %s", folder)
