"""The host-agnostic step: a read ``dataflex:`` block mounted against a host, its mechanism run once per step.

The order of one step (warm-up, one prepared batch, empty steps left alone, the mechanism under ``on_invalid``, the
``dataflex/*`` metrics) is in docs/architecture.md; the host writes the result where its loss reads it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from ..batch import Batch
from ..block import DataFlexBlock, read_block
from ..compute import ComputeTotals, compute_counters
from ..errors import ConfigError
from ..mechanisms.base import Mechanism
from ..precomputed import StepInputs, inputs_of, prepare_batch
from ..step.context import StepContext
from ..step.host import HostCapabilities
from ..step.result import PREFIX, StepResult
from ..step.seams import S, Seam
from .mount import mount_mechanism


class DataFlexStep(StepContext):
    """A read ``dataflex:`` block, mounted against a host (:meth:`mount`) and run once per training step (:meth:`run`).

    Once mounted it is the :class:`~dataflex_core.step.context.StepContext` its mechanism runs in. A host holds the
    :class:`~dataflex_core.session.DataFlexSession`, which is one.

    :param block: the block, read once (:func:`~dataflex_core.block.read_block`; ``None``: the host gave none).
    """

    def __init__(self, block: DataFlexBlock | None) -> None:
        self.block = block

    def mount(
        self,
        host: HostCapabilities,
        *,
        loss_unit: str,
        ctx: Mapping[str, Any] | None = None,
        adv_estimator: str | None = None,
        is_group_estimator: Any = None,
        extra_keys: Iterable[str] = (),
    ) -> None:
        """Build the block and check it against ``host``: one clear error on the first problem, before the first rollout
        (:func:`~dataflex_core.runner.mount.mount_mechanism`).

        :param loss_unit: the unit of this run's loss (``token`` or ``sequence``).
        :param ctx: the host's own context for components (``loss_unit`` is added).
        :param adv_estimator: the host's advantage estimator, for the ``needs_groups`` check.
        :param is_group_estimator: the host's answer to "does this estimator use ``uid`` groups?".
        :param extra_keys: further block keys the host reads itself.
        """
        if self.block is None:
            raise ConfigError("the dataflex block is empty; give at least scorer and actuator")
        pipeline, mechanism, host = mount_mechanism(
            self.block, host, loss_unit=loss_unit, adv_estimator=adv_estimator,
            is_group_estimator=is_group_estimator, extra_keys=extra_keys,
        )  # fmt: skip
        super().__init__(
            pipeline,
            host,
            loss_unit=loss_unit,
            ctx={**(ctx or {}), "loss_unit": loss_unit},
            on_invalid=self.block.on_invalid,
            call_budget_s=self.block.call_budget_s,
            runs_in_warmup=mechanism.runs_in_warmup,
        )
        #: The mechanism, with its parsed block keys (``settings``) and its mount-time decisions.
        self.mechanism: Mechanism = mechanism
        #: The steps of the mechanisms this one drives (``filter.draw``), by role.
        self.nested: dict[str, DataFlexStep] = {}
        for role, inner in mechanism.nested().items():
            step = DataFlexStep(read_block(inner))
            step.mount(
                host, loss_unit=loss_unit, ctx=ctx, adv_estimator=adv_estimator,
                is_group_estimator=is_group_estimator, extra_keys=extra_keys,
            )  # fmt: skip
            mechanism.adopt(role, step.mechanism, step)
            self.nested[role] = step
        #: Fields the step reads each time: ``response_mask``, the components' and the mechanism's own.
        nested_fields = [name for inner in self.nested.values() for name in inner.fields]
        self.fields: list[str] = list(dict.fromkeys([*mechanism.fields(pipeline), *nested_fields]))
        #: Steps that had no valid token, over the run.
        self.empty_steps = 0
        #: The run's cumulative ``dataflex/compute/*`` counts (checkpointed with the component state).
        self.compute_totals = ComputeTotals()
        #: The mechanism's implementation of each host seam it needs (:meth:`seam`), built on first use.
        self._seams: dict[type[Seam], Seam] = {}

    def describe(self) -> str:
        """One line: the mechanism, its components, the loss unit and what the step reads."""
        p = self.pipeline
        host_ctx = ", ".join(f"{k}={v}" for k, v in self.ctx.items() if k != "loss_unit")
        unit = f"mean one per {self.loss_unit}" + (f" ({host_ctx})" if host_ctx else "")
        return (
            f"{p.mechanism}: scorer {p.scorer_spec.label} -> {p.actuator_spec.kind} {p.actuator_spec.label}; "
            f"{unit}, warmup_step={p.warmup_step}, on_invalid={self.on_invalid.mode}, reads {self.fields}"
        ) + "".join(
            f"; {self.mechanism.describe_nested(role, inner.describe())}" for role, inner in self.nested.items()
        )

    def seam(self, kind: type[S]) -> S | None:
        """The mechanism's implementation of the host seam ``kind``; ``None`` when the mechanism does not use it.

        :raises TypeError: ``kind`` is not a :class:`~dataflex_core.step.seams.Seam` subclass.
        """
        if not (isinstance(kind, type) and issubclass(kind, Seam)):
            raise TypeError(
                f"seam(kind) takes a seam class of dataflex_core.step.seams (e.g. GenerationRounds), got {kind!r}"
            )
        if kind not in self.mechanism.seams:
            return None
        held = self._seams.get(kind)
        if held is None:
            held = self.mechanism.implement(kind, self)
            if not isinstance(held, kind):
                raise TypeError(
                    f"mechanism {self.mechanism.name!r} implements the seam {kind.name!r} with {held!r}, which is "
                    f"not a {kind.__qualname__}"
                )
            self._seams[kind] = held
        return held  # type: ignore[return-value]

    def count(
        self,
        response_mask: torch.Tensor,
        advantages: torch.Tensor | None = None,
        *,
        is_padding: torch.Tensor | None = None,
        kept: torch.Tensor | None = None,
        inputs: StepInputs | None = None,
        **mechanism_counts: int,
    ) -> dict[str, float]:
        """The step's ``dataflex/compute/*`` counters and the run's totals
        (:func:`~dataflex_core.compute.compute_counters`).

        :meth:`run` calls it; a host calls it itself on a step it does not run (before ``warmup_step``).
        """
        return compute_counters(
            response_mask, advantages, is_padding=is_padding, kept=kept, totals=self.compute_totals, inputs=inputs,
            **mechanism_counts,
        )  # fmt: skip

    def run(
        self,
        batch: Batch,
        step: int,
        *,
        importance_weights: torch.Tensor | None = None,
        start: float | None = None,
        advantages: torch.Tensor | None = None,
        generation: Any = None,
    ) -> StepResult:
        """The mechanism on ``batch``: weights (or a kept mask) for the loss, or an update of the train sampler.

        :param batch: the step's fields (:attr:`fields`) plus ``response_mask`` and optionally a bool ``is_padding``
            ``(bs,)``.
        :param importance_weights: ``(bs, L)`` weights the framework already applies; loss weights compose with them.
        :param start: ``time.perf_counter()`` when the host's hook began (``dataflex/hook_time_s`` counts from it).
        :param advantages: the framework's advantages when ``batch`` does not carry them (for the wasted count).
        :param generation: what built ``batch`` when the host generated it in rounds or stages; the mechanism reads it
            as ``step.generation`` during this call.
        :raises InvalidOutputError: invalid plugin output, with ``on_invalid: raise``.
        """
        start = time.perf_counter() if start is None else start
        if advantages is None:
            advantages = batch.batch.get("advantages")
        self.generation = generation
        try:
            idle = self.idle(step)
            if idle is not None:
                idle.update(self._count(batch, inputs_of(batch), advantages, StepResult(idle)))
                return StepResult(idle)
            inputs = inputs_of(prepare_batch(batch))  # masks, token counts and uid groups: once for the whole step
            mechanism = self.mechanism
            empty = not bool(inputs.token_counts.sum())
            if empty:  # nothing to score or weigh: the framework's step as it is, no component called
                self.empty_steps += 1
                result = StepResult(mechanism.skip(self, batch, step))
            else:
                result, fell_back = self.on_invalid.attempt(
                    lambda: mechanism.run(self, batch, step, importance_weights), step=step, instead=mechanism.fallback
                )
                if result is None:
                    result = StepResult({}, fallback=fell_back)
            result.metrics[f"{PREFIX}active"] = 1.0 if self.active(step) else 0.0
            result.metrics[f"{PREFIX}uniform_fallback"] = 1.0 if result.fallback else 0.0
            result.metrics[f"{PREFIX}uniform_fallback_total"] = float(self.uniform_fallbacks)
            result.metrics[f"{PREFIX}empty_step"] = 1.0 if empty else 0.0
            result.metrics[f"{PREFIX}empty_step_total"] = float(self.empty_steps)
            result.metrics.update(self._count(batch, inputs, advantages, result))
            return result.timed(start)
        finally:
            self.generation = None

    def _count(
        self, batch: Batch, inputs: StepInputs, advantages: torch.Tensor | None, result: StepResult
    ) -> dict[str, float]:
        """:meth:`count` on the batch as the mechanism left it."""
        return self.count(
            batch.batch["response_mask"], advantages, is_padding=batch.batch.get("is_padding"), kept=result.kept,
            inputs=inputs if inputs.matches(batch) else None, **result.compute,
        )  # fmt: skip


def mount_step(block: Any, host: HostCapabilities, **mount: Any) -> DataFlexStep:
    """A ``dataflex:`` block alone (a mapping or an OmegaConf node), read and mounted against ``host``: the running
    step, for tests, benchmarks and tools (a host holds a :class:`~dataflex_core.session.DataFlexSession`).

    :param mount: the keywords of :meth:`DataFlexStep.mount` (``loss_unit`` is required).
    """
    step = DataFlexStep(read_block(block))
    step.mount(host, **mount)
    return step
