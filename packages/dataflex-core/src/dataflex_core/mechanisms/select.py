"""``mechanism: select``: scorer -> selector -> the rows that count in the loss.

The kept rows become 0/1 weights, renormalised, so dropping half the batch does not halve the step. A host that
can recompute advantages serves ``recompute_advantage``; one that can remove rows (``hard_drop``) drops them,
the kept rows weighing 1 when the loss recounts its tokens, or ``rows / kept rows`` when it does not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar

import torch

from ..config import DataFlexPipeline
from ..errors import IncompatibleComponentError, InvalidOutputError
from ..normalize import valid_sample_mask, valid_token_counts, valid_token_mask
from ..precomputed import inputs_of
from ..step.calls import component_label
from ..step.context import StepContext
from ..step.host import HostCapabilities
from ..step.metrics import PREFIX, weight_metrics
from ..step.result import StepResult
from ..step.seams import LossWeights, S
from ..step.selection import selection_metrics
from .base import LossMechanism, check_rollout_time, selected_rows


class Select(LossMechanism):
    """A selector's kept rows, as renormalised 0/1 weights or (on a host that can) a hard drop."""

    name: ClassVar[str] = "select"
    actuator_kind: ClassVar[str] = "selector"

    def __init__(self, block: Mapping[str, Any]) -> None:
        super().__init__(block)
        #: The host recomputes group advantages on the kept rows (decided in :meth:`mount`).
        self.recompute_advantage = False
        #: The host removes the dropped rows from its loss mask and denominator (decided in :meth:`mount`).
        self.hard_drop = False

    @classmethod
    def check(cls, pipeline: DataFlexPipeline, host: HostCapabilities, loss_unit: str | None) -> None:
        check_rollout_time(pipeline, host, cls.name)
        if bool(pipeline.actuator.recompute_advantage) and not host.recompute_advantage:
            raise IncompatibleComponentError(
                f"{pipeline.actuator_spec.kind} {pipeline.actuator_spec.label} asks for group advantages "
                f"recomputed on its kept rows (recompute_advantage=True), but {host.name} cannot recompute "
                "advantages; set the selector's recompute_advantage param to false, or pick another selector"
            )

    def mount(self, pipeline: DataFlexPipeline, host: HostCapabilities, *, grouped: bool | None) -> None:
        # group advantages exist only under a group estimator; without one there is nothing to recompute
        self.recompute_advantage = bool(pipeline.actuator.recompute_advantage) and grouped is True
        self.hard_drop = self.recompute_advantage and host.hard_drop

    def implement(self, seam: type[S], step: StepContext) -> S:
        if seam is LossWeights:  # what the host does with the kept rows, decided at mount
            return LossWeights(recompute_advantage=self.recompute_advantage, hard_drop=self.hard_drop)  # type: ignore[return-value]
        return super().implement(seam, step)

    def fields(self, pipeline: DataFlexPipeline) -> list[str]:
        return list(dict.fromkeys([*pipeline.requires, "uid"]))  # uid: the groups a selection drops whole

    def weights(self, step: StepContext, batch: Any, step_id: int) -> torch.Tensor:
        """The kept rows as float32 0/1 ``(n,)``; keeping no valid row is invalid output."""
        keep = selected_rows(step, batch, step_id)
        if not keep.any() and valid_sample_mask(batch).any():
            raise InvalidOutputError(
                f"{component_label(step.pipeline, 'actuator')} kept no sample at step {step_id}; a step needs at least "
                "one kept sample (widen the selector's band/fraction, or set dataflex.on_invalid=uniform to train on "
                "all samples then)"
            )
        return keep.to(torch.float32)

    def run(self, step: StepContext, batch: Any, step_id: int, importance_weights: torch.Tensor | None) -> StepResult:
        raw = step.on_real_rows(batch, inputs_of(batch), lambda rows: self.weights(step, rows, step_id))
        kept = raw > 0
        if self.hard_drop:
            valid_tokens, counts = valid_token_mask(batch), valid_token_counts(batch)
            factor, units = hard_drop_factor(kept, valid_tokens, batch, step.host.drop_denominator)
            if step.host.drop_denominator == "tokens":  # the units are the kept rows' valid tokens
                counts = torch.where(kept.to(counts.device), counts, 0)
            applied = factor if importance_weights is None else factor.unsqueeze(-1) * importance_weights
            metrics = weight_metrics(
                factor, units, step.loss_unit, token_counts=counts, importance_weights=importance_weights,
                applied=None if importance_weights is None else applied,
            )  # fmt: skip
            result = StepResult({**metrics, f"{PREFIX}hard_drop": 1.0}, applied=applied, factor=factor)
        else:
            result = self.applied(step, batch, raw, step_id, importance_weights)
        result.metrics.update(selection_metrics(kept, batch))
        result.metrics[f"{PREFIX}advantage_recomputed"] = 1.0 if self.recompute_advantage else 0.0
        return replace(result, kept=kept, recompute_advantage=self.recompute_advantage, hard_drop=self.hard_drop)


def hard_drop_factor(
    kept: torch.Tensor, valid_tokens: torch.Tensor, batch: Any, denominator: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(factor, units)`` of a hard drop: each kept row's weight on the loss mask without the dropped rows, and
    the valid tokens the loss's denominator still counts.

    ``tokens``: the loss recounts the kept mask, so a kept row weighs 1 and the units are the kept rows' tokens.
    ``rows``: the loss divides by a row count the drop does not change, so a kept row weighs ``rows / kept rows``
    (the policy term of a batch of the kept rows alone) and the units stay every valid token.
    """
    padding = batch.batch.get("is_padding")
    rows = len(kept) if padding is None else int((~padding.bool()).sum())
    scale = rows / max(int(kept.sum()), 1) if denominator == "rows" else 1.0
    factor = kept.to(torch.float32) * scale
    units = valid_tokens & kept.to(valid_tokens.device).unsqueeze(-1) if denominator == "tokens" else valid_tokens
    return factor, units
