"""The legacy-line trainer verl's legacy task runner builds when dataflex-verl is installed.

``main_ppo_v0.TaskRunner.run`` constructs ``RayPPOTrainer`` by its module
global; :mod:`dataflex_verl.plugin_entry` rebinds that global to
:class:`DataFlexRayPPOTrainer` once ``verl.trainer.main_ppo_v0`` is imported.
Without a ``dataflex:`` block it is verl's ``RayPPOTrainer`` unchanged.
"""

from __future__ import annotations

from verl.trainer.ppo.ray_trainer import RayPPOTrainer

from .legacy import DataFlexLegacyMixin


class DataFlexRayPPOTrainer(DataFlexLegacyMixin, RayPPOTrainer):
    """verl's ``RayPPOTrainer`` with DataFlex at ``compute_advantage``."""


def install_trainer(module) -> None:
    """Make ``module.RayPPOTrainer`` (verl's legacy task runner's global) :class:`DataFlexRayPPOTrainer`."""
    if module.RayPPOTrainer is RayPPOTrainer:
        module.RayPPOTrainer = DataFlexRayPPOTrainer
