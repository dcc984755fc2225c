"""DataFlex state in verl checkpoints: where verl 0.9 writes and resumes, and the mixin that hooks both.

verl's v1 trainer writes ``global_step_N/`` (actor, critic, ``data.pt``) in
``_save_checkpoint`` and reads it back in ``_load_checkpoint`` (called from
``init``). The session's files (plugin set, component state) are written into
the same folder *before* verl's own: verl writes
``latest_checkpointed_iteration.txt`` last, so a save that fails anywhere
leaves no folder the tracker points at, and a folder it points at always has
them. On resume the plugin set is checked *before* verl loads the model
weights, so a mismatch fails fast, and the state is restored after verl's
load (the train sampler comes back with ``data.pt``, and is checked then:
:func:`check_train_sampler_state`).

Files are written on the driver's local disk next to verl's ``data.pt``;
like ``data.pt`` they are not copied to ``trainer.default_hdfs_dir``.
"""

from __future__ import annotations

import os
from typing import Any

from dataflex_core.errors import ConfigError
from dataflex_core.session import DataFlexSession
from dataflex_core.step.state import ComponentStateError

#: The file verl 0.9 saves its train dataloader's state in (the train sampler's with it), in each checkpoint folder.
DATALOADER_STATE = "data.pt"


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


def saved_sampler_state(loader: Any) -> Any:
    """The train sampler's state in what verl's ``data.pt`` gave a torchdata ``StatefulDataLoader`` (``None``: none
    pending), where torchdata keeps it without workers or, with them, in its main process's snapshot."""
    pending = getattr(loader, "next_iter_state", None)
    if not isinstance(pending, dict):
        return None
    snapshot = pending.get("_snapshot")
    main = snapshot.get("_main_snapshot") if isinstance(snapshot, dict) else pending
    sampler_iter = main.get("_sampler_iter_state") if isinstance(main, dict) else None
    return sampler_iter.get("sampler_state") if isinstance(sampler_iter, dict) else None


def check_train_sampler_state(loader: Any, sampler: Any, path: str) -> None:
    """Give DataFlex's train ``sampler`` its state from ``data.pt`` (at ``path``) now, refused naming the file.

    torchdata hands the state to the sampler only when the fit loop asks for the first batch, where a state the
    sampler refuses (another dataset's, or altered: each field is checked) could not say which file holds it.
    Loading it here first gives the sampler the same state (torchdata loads it again then).
    """
    if sampler is None or getattr(loader, "sampler", None) is not sampler:
        return
    state = saved_sampler_state(loader)
    if state is None:
        return
    fix = f"resume from another checkpoint, or delete {DATALOADER_STATE} from it (verl then starts the train "
    fix += "dataloader afresh)"
    try:
        sampler.load_state_dict(state)
    except ConfigError as exc:  # another dataset: what the sampler says, and the file
        raise ConfigError(f"{path}: the train sampler's state: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - a field no run writes (StateFieldError) or a raw error, named
        raise ComponentStateError(
            f"{path}: the train sampler's state ({type(sampler).__name__}): {type(exc).__name__}: {exc}; it was not "
            f"written by this run or was altered: {fix}"
        ) from exc


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
            loader = self.train_dataloader  # type: ignore[attr-defined]
            check_train_sampler_state(loader, self.dataflex.sampler, os.path.join(folder, DATALOADER_STATE))
