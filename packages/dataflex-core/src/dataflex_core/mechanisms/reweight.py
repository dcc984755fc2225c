"""``mechanism: reweight``: scorer -> reweighter -> loss weights, mean one in the loss's unit.

The reweighter's weights, at the scorer's granularity (``(n,)`` per sample or ``(n, L)`` per token), are checked by the
weights contract, put back on every row (0 on padding), normalised in the loss unit and composed with the framework's
own importance weights (:class:`~dataflex_core.mechanisms.LossMechanism`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from ..config import DataFlexPipeline
from ..errors import IncompatibleComponentError
from ..step.context import StepContext
from ..step.host import HostCapabilities
from .base import LossMechanism, check_rollout_time, scored_weights


class Reweight(LossMechanism):
    """Weights from a reweighter, per sample or per token."""

    name: ClassVar[str] = "reweight"
    actuator_kind: ClassVar[str] = "reweighter"

    @classmethod
    def check(cls, pipeline: DataFlexPipeline, host: HostCapabilities, loss_unit: str | None) -> None:
        timing = pipeline.scorer.timing
        if timing in host.timings and pipeline.scorer.granularity == "token" and not host.token_weights:
            raise IncompatibleComponentError(
                f"scorer {pipeline.scorer_spec.label} gives token-level scores, but {host.name} applies one weight "
                "per sample; pick a prompt- or response-level scorer"
            )
        check_rollout_time(pipeline, host, cls.name)

    def weights(self, step: StepContext, batch: Any, step_id: int) -> torch.Tensor:
        return scored_weights(step, batch, step_id)
