"""DataFlex state in TRL checkpoints: the plugin set and each stateful component's ``state_dict``.

TRL (through transformers' ``Trainer``) writes ``checkpoint-N/`` in
``_save_checkpoint`` and, on ``train(resume_from_checkpoint=...)``, restores
the optimizer in ``_load_optimizer_and_scheduler`` (TRL restores its own
entropy controller there too). The mixin writes the DataFlex files into the
same folder before the trainer's own files, checks the recorded plugin set
before any training state is loaded, and gives the components their state
back with the optimizer's. Components run on the main process, whose state is
the one saved.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from dataflex_core import ConfigError
from dataflex_core.lock.pinning import ResolvedPlugins, check_plugin_record, save_plugin_record
from dataflex_core.step import initial_proportions
from dataflex_core.step.state import Stateful, load_component_state, save_component_state

logger = logging.getLogger("dataflex_trl")


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
    """Saves and restores the plugin set and component state with TRL's checkpoints.

    Expects ``self.dataflex`` (the mounted step), ``self.dataflex_plugins`` and
    ``self.dataflex_sampler`` (``None`` unless ``mechanism: mix``) and
    ``self.dataflex_curriculum_sampler`` (``None`` unless ``mechanism: curriculum``).
    """

    dataflex_plugins: ResolvedPlugins

    def _dataflex_stateful(self) -> dict[str, Stateful]:
        """What travels with checkpoints, by role: the components, and a curriculum's prompt history."""
        pipeline = self.dataflex.pipeline  # type: ignore[attr-defined]
        stateful: dict[str, Stateful] = {"scorer": pipeline.scorer, "actuator": pipeline.actuator}
        curriculum = self.dataflex_curriculum_sampler  # type: ignore[attr-defined]
        if curriculum is not None:
            stateful["history"] = curriculum.history
        return stateful

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        if self.args.should_save:  # type: ignore[attr-defined]
            name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"  # type: ignore[attr-defined]
            folder = os.path.join(self._get_output_dir(trial=trial), name)  # type: ignore[attr-defined]
            save_plugin_record(folder, self.dataflex_plugins)
            save_component_state(folder, self._dataflex_stateful(), self.state.global_step)  # type: ignore[attr-defined]
        super()._save_checkpoint(model, trial)  # type: ignore[misc]

    def train(self, resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any) -> Any:
        folder = resume_folder(resume_from_checkpoint, self.args.output_dir)  # type: ignore[attr-defined]
        if folder is not None:
            check_plugin_record(folder, self.dataflex_plugins)
        return super().train(resume_from_checkpoint, *args, **kwargs)  # type: ignore[misc]

    def _load_optimizer_and_scheduler(self, checkpoint: Any) -> None:
        super()._load_optimizer_and_scheduler(checkpoint)  # type: ignore[misc]
        if checkpoint is None:
            return
        load_component_state(checkpoint, self._dataflex_stateful())
        sampler = self.dataflex_sampler  # type: ignore[attr-defined]
        if sampler is not None:  # the sampler was built before the mixer's state came back
            mix = self.dataflex.mix  # type: ignore[attr-defined]
            sampler.mixture.set_proportions(initial_proportions(self.dataflex.pipeline.actuator, mix.domains))  # type: ignore[attr-defined]
        logger.info("dataflex state restored from %s", checkpoint)
