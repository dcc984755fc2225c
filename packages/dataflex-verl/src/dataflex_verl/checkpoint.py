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
from pathlib import Path
from typing import Any

import torch

from dataflex_core import Component, ConfigError

from .pinning import ResolvedPlugins, check_plugin_record, save_plugin_record

logger = logging.getLogger("dataflex_verl")

#: Component state saved with each checkpoint.
CHECKPOINT_STATE = "dataflex_state.pt"
STATE_FORMAT = 1


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


def save_component_state(folder: str | os.PathLike[str], components: dict[str, Component], global_steps: int) -> None:
    """``torch.save`` each component's ``state_dict`` with its kind and name (atomically)."""
    payload = {
        "format": STATE_FORMAT,
        "global_steps": global_steps,
        "components": {
            role: {"kind": c.kind, "name": c.name or type(c).__name__, "state": c.state_dict()}
            for role, c in components.items()
        },
    }
    path = Path(folder) / CHECKPOINT_STATE
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load_component_state(folder: str | os.PathLike[str], components: dict[str, Component]) -> None:
    """Give each component the state saved for its role; a different component in that role is an error."""
    path = Path(folder) / CHECKPOINT_STATE
    if not path.exists():
        stateful = [role for role, c in components.items() if c.state_dict()]
        logger.warning(
            "checkpoint %s has no %s; dataflex components start fresh%s",
            folder,
            CHECKPOINT_STATE,
            f" (stateful: {', '.join(stateful)})" if stateful else "",
        )
        return
    payload = torch.load(path, map_location="cpu", weights_only=False)
    saved = payload.get("components", {})
    for role, component in components.items():
        entry = saved.get(role)
        name = component.name or type(component).__name__
        if entry is None:
            logger.warning("checkpoint %s has no state for the dataflex %s; it starts fresh", folder, role)
            continue
        if (entry["kind"], entry["name"]) != (component.kind, name):
            raise ConfigError(
                f"checkpoint {folder} holds the state of {entry['kind']} {entry['name']!r} as dataflex {role}, "
                f"but this run configures {component.kind} {name!r}; resume with the same dataflex.{role}, or "
                f"delete {path} to start the components fresh"
            )
        component.load_state_dict(entry["state"])


class DataFlexCheckpointMixin:
    """Saves and restores the DataFlex plugin set and component state with verl's checkpoints.

    Expects ``self.dataflex`` (the mounted pipeline) and ``self.dataflex_plugins``
    (:class:`~dataflex_verl.pinning.ResolvedPlugins`), both set in the constructor.
    """

    dataflex_plugins: ResolvedPlugins

    def _dataflex_stateful(self) -> dict[str, Component]:
        """Components whose state travels with checkpoints, by role; mechanisms may add their own."""
        pipeline = self.dataflex.pipeline  # type: ignore[attr-defined]
        return {"scorer": pipeline.scorer, "actuator": pipeline.actuator}

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
