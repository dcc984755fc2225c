"""DataFlex in verl's one-step-off trainer (``verl/experimental/one_step_off_policy``).

``OneStepOffRayTrainer`` is a ``SeparateRayPPOTrainer`` (a ``RayPPOTrainer``
subclass on ``DataProto``) whose ``fit`` is a coroutine: it generates the next
step's rollouts while the current step trains, so from the second step on a
batch was sampled with weights one update older than the actor it trains
(:mod:`dataflex_verl.staleness`). DataFlex runs there as on the legacy line,
at the ``compute_advantage`` that ``_fit_compute_advantage`` calls
(:mod:`dataflex_verl.legacy`); every step also reports the batch's staleness.

``python -m verl.experimental.one_step_off_policy.main_ppo`` runs its module as
``__main__`` and sends its task runner to Ray by value, which looks the trainer
class up in ``verl.experimental.one_step_off_policy.ray_trainer``; so
:func:`install_trainer` rebinds ``OneStepOffRayTrainer`` there (when that module
is imported: :mod:`dataflex_verl.plugin_entry`). Without a ``dataflex:`` block
the trainer is verl's, unchanged.
"""

from __future__ import annotations

from typing import Any

from verl.experimental.one_step_off_policy import ray_trainer as verl_one_step_off

from . import dataproto_io
from .legacy import DataFlexLegacyMixin, running
from .staleness import WeightVersions

#: verl's own class, the base of :class:`DataFlexOneStepOffRayTrainer`.
VerlOneStepOffRayTrainer = verl_one_step_off.OneStepOffRayTrainer


class DataFlexSeparatedMixin(DataFlexLegacyMixin):
    """The legacy-line mixin for a separated trainer: an async ``fit``, and the staleness of each batch."""

    def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
        #: the actor's updates and the weights each sync sent, for the staleness metrics
        self.dataflex_versions = WeightVersions()
        super().__init__(config, *args, **kwargs)

    async def fit(self) -> Any:  # type: ignore[override]
        with running(self):
            return await super(DataFlexLegacyMixin, self).fit()  # type: ignore[misc]

    def _dataflex_after_advantage(self, data: Any, estimate: Any) -> Any:
        self.dataflex_metrics.update(self.dataflex_versions.metrics(dataproto_io.sync_tags(data)))
        return super()._dataflex_after_advantage(data, estimate)

    def _fit_update_weights(self) -> None:
        super()._fit_update_weights()  # type: ignore[misc]
        self.dataflex_versions.synced_at(self.global_steps)  # type: ignore[attr-defined]

    def _update_actor(self, batch: Any) -> Any:
        output = super()._update_actor(batch)
        self.dataflex_versions.updated()
        return output

    def _load_checkpoint(self) -> None:
        super()._load_checkpoint()
        self.dataflex_versions.resumed(self.global_steps)  # type: ignore[attr-defined]


class DataFlexOneStepOffRayTrainer(DataFlexSeparatedMixin, VerlOneStepOffRayTrainer):
    """verl's ``OneStepOffRayTrainer`` with DataFlex at ``compute_advantage``."""


def install_trainer(module: Any = verl_one_step_off) -> None:
    """Make ``module.OneStepOffRayTrainer`` (what verl's one-step-off task runner builds) the DataFlex trainer."""
    if module.OneStepOffRayTrainer is VerlOneStepOffRayTrainer:
        module.OneStepOffRayTrainer = DataFlexOneStepOffRayTrainer


install_trainer()
