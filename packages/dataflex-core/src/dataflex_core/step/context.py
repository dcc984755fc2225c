"""What a mechanism sees of the step that runs it: the pipeline, the host, the component calls, the policies.

The runner's :class:`~dataflex_core.runner.DataFlexStep` is a :class:`StepContext`, but a mechanism builds only on what
this class offers, so the mechanisms sit below the runner that mounts and runs them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..batch import Batch
from ..config import DataFlexPipeline
from ..precomputed import STEP_INPUTS_KEY, StepInputs
from .calls import ComponentCalls
from .host import HostCapabilities
from .on_invalid import InvalidOutputPolicy
from .result import PREFIX


class StepContext:
    """The running step as a mechanism uses it.

    :param pipeline: the mounted pipeline (its scorer and actuator).
    :param host: what the host declared for this run.
    :param loss_unit: ``token`` or ``sequence``: the unit loss weights have mean one in.
    :param ctx: keyword context every component call gets (``loss_unit`` included).
    :param on_invalid: ``raise`` or ``uniform`` (:class:`~dataflex_core.step.on_invalid.InvalidOutputPolicy`).
    :param call_budget_s: seconds after which a component call still running is warned about (``None``: never).
    :param runs_in_warmup: the mechanism runs before ``warmup_step`` too (it records what it needs meanwhile).
    :param sampler: the train sampler the mechanism drives (mix, curriculum), when already built.
    """

    def __init__(
        self,
        pipeline: DataFlexPipeline,
        host: HostCapabilities,
        *,
        loss_unit: str,
        ctx: Mapping[str, Any],
        on_invalid: str = "raise",
        call_budget_s: float | None = None,
        runs_in_warmup: bool = False,
        sampler: Any = None,
    ) -> None:
        self.pipeline = pipeline
        self.host = host
        self.loss_unit = loss_unit
        self.ctx: dict[str, Any] = dict(ctx)
        self.runs_in_warmup = runs_in_warmup
        self.on_invalid = InvalidOutputPolicy(on_invalid)
        #: Every call into the pipeline's components goes through these (:mod:`.calls`).
        self.calls = ComponentCalls(pipeline, budget_s=call_budget_s)
        #: The train sampler of a mechanism that draws the prompts (set when the host builds its dataloader).
        self.sampler = sampler
        #: What built this step's batch when the host generated it in rounds or stages; ``None`` otherwise.
        self.generation: Any = None

    @property
    def uniform_fallbacks(self) -> int:
        return self.on_invalid.fallbacks

    def active(self, step: int) -> bool:
        """True once ``step`` has reached ``warmup_step``."""
        return self.pipeline.active(step)

    def idle(self, step: int) -> dict[str, float] | None:
        """The metrics of a step that does nothing (before ``warmup_step``), or ``None`` when the step runs."""
        if self.active(step) or self.runs_in_warmup:
            return None
        return {f"{PREFIX}active": 0.0}

    def components_batch(self, batch: Batch) -> tuple[Batch, torch.Tensor | None]:
        """``batch`` without framework padding rows (a copy of its real rows), and the kept-row mask (``None`` when
        nothing was removed), for mechanisms that keep something per real row (loss mechanisms: :meth:`on_real_rows`).
        """
        padding = batch.batch.get("is_padding")
        if padding is None or not bool(padding.any()):
            return _without_padding_field(batch), None
        real = ~padding.bool()
        return _without_padding_field(batch.select_rows(real)), real

    def on_real_rows(self, batch: Batch, inputs: StepInputs, compute: Callable[[Batch], torch.Tensor]) -> torch.Tensor:
        """``compute`` on ``batch`` with the framework's padding rows as the empty rows they are (no copy when they are
        empty already, as verl's are); per-row ``(bs,)`` output is 0 on padding rows (``finalize`` zeroes a ``(bs, L)``
        one). ``inputs``: the step's prepared values of ``batch``.
        """
        view = inputs.for_components
        if view is not inputs:
            meta = {**batch.meta_info, STEP_INPUTS_KEY: view}
            batch = Batch({**batch.batch, "response_mask": view.response_mask}, batch.non_tensor_batch, meta)
        values = compute(batch)
        if values.dim() != 1 or not inputs.has_padding:
            return values
        return values.masked_fill(inputs.padding.to(values.device).bool(), 0)


def _without_padding_field(batch: Batch) -> Batch:
    if "is_padding" not in batch.batch:
        return batch
    return Batch({k: v for k, v in batch.batch.items() if k != "is_padding"}, batch.non_tensor_batch, batch.meta_info)
