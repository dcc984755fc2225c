"""The three DataFlex trainers, registered with verl's v1 trainer registry on import.

Each keeps its base trainer's behaviour: the mixin resets
``trainer.v1.trainer_mode`` to the base mode before verl's constructor reads
it, so ``dataflex_sync`` gets the sync replay buffer and batch sizes, not the
async code paths.
"""

from __future__ import annotations

from verl.trainer.ppo.v1 import (
    PPOTrainerColocateAsync,
    PPOTrainerSeparateAsync,
    PPOTrainerSync,
    register_trainer,
)

from . import TRAINER_MODES
from .mixin import DataFlexTrainerMixin


@register_trainer("dataflex_sync")
class DataFlexTrainerSync(DataFlexTrainerMixin, PPOTrainerSync):
    """verl's ``sync`` trainer with DataFlex applied in ``_compute_advantage``."""

    base_trainer_mode = "sync"
    dataflex_trainer_mode = "dataflex_sync"


@register_trainer("dataflex_colocate_async")
class DataFlexTrainerColocateAsync(DataFlexTrainerMixin, PPOTrainerColocateAsync):
    """verl's ``colocate_async`` trainer with DataFlex applied in ``_compute_advantage``."""

    base_trainer_mode = "colocate_async"
    dataflex_trainer_mode = "dataflex_colocate_async"


@register_trainer("dataflex_separate_async")
class DataFlexTrainerSeparateAsync(DataFlexTrainerMixin, PPOTrainerSeparateAsync):
    """verl's ``separate_async`` trainer with DataFlex applied in ``_compute_advantage``."""

    base_trainer_mode = "separate_async"
    dataflex_trainer_mode = "dataflex_separate_async"


TRAINERS = {
    cls.dataflex_trainer_mode: cls
    for cls in (DataFlexTrainerSync, DataFlexTrainerColocateAsync, DataFlexTrainerSeparateAsync)
}
assert {mode: cls.base_trainer_mode for mode, cls in TRAINERS.items()} == TRAINER_MODES
