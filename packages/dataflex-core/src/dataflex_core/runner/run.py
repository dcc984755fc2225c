"""The host-agnostic step: mount the ``dataflex:`` block against a host, then run its mechanism once per step.

Every host runs the same step once per training step, on the whole step's
batch in the canonical vocabulary (:mod:`dataflex_core.step.fields`):

1. the warm-up rule: before ``warmup_step`` the step does nothing (a
   mechanism that records history meanwhile says so: ``runs_in_warmup``);
2. prepare the batch's shared values once (:func:`~dataflex_core.prepare_batch`:
   valid masks, token counts, the ``uid`` group index); components see only
   the real rows (the framework's ``is_padding`` rows removed);
3. a step with no valid token (every row padding or an empty response: a
   reward function that scored nothing, every completion masked) is left to
   the framework as it is: no component is called, nothing is written, and
   ``dataflex/empty_step`` counts it (:meth:`~dataflex_core.mechanisms.Mechanism.skip`
   notes the step for a mechanism that keeps history);
4. run the mechanism (:mod:`dataflex_core.mechanisms`): scorer -> actuator,
   each call under the rules of :mod:`.calls` (read-only inputs, named
   exceptions, the framework's process-wide settings kept, a budget), output
   checked by :mod:`dataflex_core.contracts`; a mechanism that weighs the loss
   normalises in the loss's unit and composes with any importance weights the
   framework already applies (:mod:`.weights`);
5. ``on_invalid``: invalid plugin output (a component's exception included)
   raises, or with ``on_invalid: uniform`` leaves the step as the framework
   would run it (a counted fallback, :class:`InvalidOutputPolicy`);
6. stamp the ``dataflex/*`` metrics every step carries (active, fallbacks,
   empty steps, hook time).

The host does the rest: reading its framework's fields, writing the weights
where its loss multiplies them in (verl: ``rollout_is_weights``; TRL: the
advantages). :class:`~dataflex_core.session.DataFlexSession` is the one object
a host holds: it pins the plugins, mounts, builds the train sampler and
carries the state around this step.

Components get ``ctx`` keyword arguments: ``loss_unit`` in every host plus the
host's own (verl: ``loss_agg_mode``, ``adv_estimator``; TRL: ``loss_type``,
``adv_estimator``), and actuators also ``step_id``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from ..batch import Batch
from ..compute import ComputeTotals, compute_counters
from ..config import DataFlexPipeline, build_from_config, dataflex_block
from ..errors import ComponentError, ConfigError, InvalidOutputError
from ..mechanisms.registry import get_mechanism, mechanisms
from ..normalize import valid_token_mask
from ..precomputed import prepare_batch
from ..step.calls import ComponentCalls
from ..step.host import HostCapabilities, check_pipeline
from ..step.result import PREFIX, StepResult

if TYPE_CHECKING:
    from ..mechanisms.base import Mechanism

logger = logging.getLogger("dataflex_core.step")

T = TypeVar("T")

#: Keys of the ``dataflex:`` block every host reads besides the core's, with their defaults
#: (``plugins`` holds ``lock`` / ``allow_drift``, read by the host's plugin pinning; ``call_budget_s``: seconds
#: after which a component call still running is warned about, ``null`` for never).
HOST_KEYS = {"on_invalid": "raise", "plugins": None, "call_budget_s": 60.0}
ON_INVALID = ("raise", "uniform")


@dataclass
class MountedStep:
    """A pipeline validated against a host's capabilities, with what the step needs each time."""

    pipeline: DataFlexPipeline
    host: HostCapabilities
    #: The mechanism, with its parsed block keys (``settings``) and its mount-time decisions.
    mechanism: Mechanism
    on_invalid: str
    #: ``token`` or ``sequence``: the unit the weights have mean one in.
    loss_unit: str
    #: Fields the step reads each time: ``response_mask`` first, the components' fields, and what the mechanism
    #: reads itself (``uid`` for select's group metrics, the domain column for mix, ...).
    fields: list[str] = field(default_factory=list)
    #: Keyword context every component call gets (besides ``step_id`` for actuators).
    ctx: dict[str, Any] = field(default_factory=dict)
    #: Seconds after which a component call still running is warned about (``None``: never).
    call_budget_s: float | None = HOST_KEYS["call_budget_s"]

    @property
    def settings(self) -> Any:
        """The mechanism's parsed block keys (e.g. ``MixSettings``), ``None`` for mechanisms without keys."""
        return self.mechanism.settings

    @property
    def recompute_advantage(self) -> bool:
        """The host recomputes group advantages on a selector's kept rows (decided once, at mount)."""
        return self.mechanism.recompute_advantage

    @property
    def hard_drop(self) -> bool:
        """The host removes a selector's dropped rows from its loss mask and denominator."""
        return self.mechanism.hard_drop

    def describe(self) -> str:
        p = self.pipeline
        host_ctx = ", ".join(f"{k}={v}" for k, v in self.ctx.items() if k != "loss_unit")
        unit = f"mean one per {self.loss_unit}" + (f" ({host_ctx})" if host_ctx else "")
        return (
            f"{p.mechanism}: scorer {p.scorer_spec.label} -> {p.actuator_spec.kind} {p.actuator_spec.label}; "
            f"{unit}, warmup_step={p.warmup_step}, on_invalid={self.on_invalid}, reads {self.fields}"
        )


def host_settings(block: Any) -> dict[str, Any]:
    """The :data:`HOST_KEYS` of a ``dataflex:`` block, checked."""
    plain = dataflex_block(block)
    settings = {key: plain.get(key, default) for key, default in HOST_KEYS.items()}
    if settings["on_invalid"] not in ON_INVALID:
        raise ConfigError(
            f"dataflex.on_invalid={settings['on_invalid']!r} is not one of {', '.join(ON_INVALID)}; "
            "raise (default) stops the run on invalid plugin output, uniform uses weights 1 for that step"
        )
    budget = settings["call_budget_s"]
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, float)) or not budget > 0):
        raise ConfigError(
            f"dataflex.call_budget_s={budget!r} must be a number of seconds > 0 (a component call running longer "
            "is warned about, naming it) or null to never warn"
        )
    settings["call_budget_s"] = None if budget is None else float(budget)
    return settings


def mechanism_keys() -> dict[str, tuple[str, ...]]:
    """Every block key a registered mechanism reads -> the mechanisms that read it."""
    owners: dict[str, tuple[str, ...]] = {}
    for cls in mechanisms():
        for key in cls.keys:
            owners[key] = (*owners.get(key, ()), cls.name)
    return owners


def mount_step(
    block: Any,
    host: HostCapabilities,
    *,
    loss_unit: str,
    ctx: Mapping[str, Any] | None = None,
    adv_estimator: str | None = None,
    is_group_estimator: Any = None,
    extra_keys: Iterable[str] = (),
) -> MountedStep:
    """Build the ``dataflex:`` block and check it against ``host``; one clear error on the first problem.

    :param loss_unit: the unit of this run's loss (``token`` or ``sequence``).
    :param ctx: the host's own context for components (``loss_unit`` is added).
    :param adv_estimator: the host's advantage estimator, for the ``needs_groups`` check.
    :param is_group_estimator: the host's answer to "does this estimator use ``uid`` groups?".
    :param extra_keys: further block keys the host reads itself.
    """
    settings = host_settings(block)
    owners = mechanism_keys()
    pipeline = build_from_config(
        block,
        adv_estimator=adv_estimator,
        is_group_estimator=is_group_estimator,
        extra_keys=(*HOST_KEYS, *owners, *extra_keys),
    )
    stray = sorted(k for k, names in owners.items() if k in pipeline.extra and pipeline.mechanism not in names)
    if stray:
        readers = " or ".join(owners[stray[0]])
        raise ConfigError(
            f"dataflex.{stray[0]} is read only by mechanism: {readers}, but dataflex.mechanism="
            f"{pipeline.mechanism!r}; remove {[k for k in stray if owners[k] == owners[stray[0]]]} or set "
            f"mechanism: {owners[stray[0]][0]}"
        )
    mechanism = get_mechanism(pipeline.mechanism)(dataflex_block(block))
    check_pipeline(pipeline, host, loss_unit=loss_unit)
    grouped = None
    if adv_estimator is not None and is_group_estimator is not None:
        grouped = is_group_estimator(adv_estimator)
    mechanism.mount(pipeline, host, grouped=grouped)
    return MountedStep(
        pipeline=pipeline,
        host=host,
        mechanism=mechanism,
        on_invalid=settings["on_invalid"],
        loss_unit=loss_unit,
        fields=list(dict.fromkeys(mechanism.fields(pipeline))),
        ctx={**(ctx or {}), "loss_unit": loss_unit},
        call_budget_s=settings["call_budget_s"],
    )


class InvalidOutputPolicy:
    """``dataflex.on_invalid`` for every mechanism: invalid plugin output raises, or is counted and replaced.

    :param mode: ``raise`` or ``uniform``.
    """

    def __init__(self, mode: str) -> None:
        self.mode = mode
        #: Steps (and draws) whose invalid output was replaced, over the run.
        self.fallbacks = 0
        #: Components whose exception was logged with its traceback (once each).
        self._traced: set[str] = set()

    def attempt(self, compute: Callable[[], T], *, step: int, instead: str) -> tuple[T | None, bool]:
        """``(compute(), False)``, or ``(None, True)`` when it raised :class:`InvalidOutputError` under ``uniform``.

        A component's exception (:class:`~dataflex_core.ComponentError`) is such output too; its traceback is
        logged the first time for each component.

        :param instead: what the caller does instead, for the warning (``"using uniform weights"``).
        """
        try:
            return compute(), False
        except InvalidOutputError as exc:
            if self.mode == "raise":
                raise
            self.fallbacks += 1
            trace = isinstance(exc, ComponentError) and exc.__cause__ is not None and exc.component not in self._traced
            if trace:
                self._traced.add(exc.component)
            logger.warning(
                "dataflex: %s; %s for step %d (dataflex.on_invalid=uniform)", exc, instead, step,
                exc_info=exc.__cause__ if trace else None,
            )  # fmt: skip
            return None, True


class DataFlexStep:
    """Runs a :class:`MountedStep` once per training step.

    :param mounted: the mounted pipeline.
    :param sampler: the train sampler its mechanism drives (mix, curriculum), when the host built one.
    """

    def __init__(self, mounted: MountedStep, sampler: Any = None) -> None:
        self.mounted = mounted
        self.on_invalid = InvalidOutputPolicy(mounted.on_invalid)
        #: Every call into the pipeline's components goes through these (:mod:`.calls`).
        self.calls = ComponentCalls(mounted.pipeline, budget_s=mounted.call_budget_s)
        #: The train sampler of a mechanism that draws the prompts (set by the session or the host).
        self.sampler = sampler
        #: Steps that had no valid token, over the run.
        self.empty_steps = 0
        #: The run's cumulative ``dataflex/compute/*`` counts (checkpointed with the component state).
        self.compute_totals = ComputeTotals()

    @property
    def pipeline(self) -> DataFlexPipeline:
        return self.mounted.pipeline

    @property
    def mechanism(self) -> Mechanism:
        return self.mounted.mechanism

    @property
    def uniform_fallbacks(self) -> int:
        return self.on_invalid.fallbacks

    def active(self, step: int) -> bool:
        return self.pipeline.active(step)

    def idle(self, step: int) -> dict[str, float] | None:
        """The metrics of a step that does nothing (before ``warmup_step``), or ``None`` when the step runs."""
        if self.active(step) or self.mechanism.runs_in_warmup:
            return None
        return {f"{PREFIX}active": 0.0}

    def count(
        self,
        response_mask: torch.Tensor,
        advantages: torch.Tensor | None = None,
        *,
        is_padding: torch.Tensor | None = None,
        kept: torch.Tensor | None = None,
        **mechanism_counts: int,
    ) -> dict[str, float]:
        """The step's ``dataflex/compute/*`` counters and the run's totals (:func:`~dataflex_core.compute.compute_counters`).

        :meth:`run` calls it; a host calls it itself on a step it does not run (before ``warmup_step``).
        """
        return compute_counters(
            response_mask, advantages, is_padding=is_padding, kept=kept, totals=self.compute_totals,
            **mechanism_counts,
        )  # fmt: skip

    def components_batch(self, batch: Batch) -> tuple[Batch, torch.Tensor | None]:
        """``batch`` without framework padding rows, and the kept-row mask (``None`` when nothing was removed)."""
        padding = batch.batch.get("is_padding")
        if padding is None or not bool(padding.any()):
            return _without_padding_field(batch), None
        real = ~padding.bool()
        return _without_padding_field(batch.select_rows(real)), real

    def on_real_rows(self, batch: Batch, compute: Callable[[Batch], torch.Tensor]) -> torch.Tensor:
        """``compute`` on the real rows of ``batch``; its ``(n, ...)`` output scattered back to every row (0 on
        padding)."""
        sub, real = self.components_batch(batch)
        values = compute(sub)
        if real is None:
            return values
        full = torch.zeros((len(batch), *values.shape[1:]), dtype=torch.float32, device=values.device)
        full[real.to(values.device)] = values.to(torch.float32)
        return full

    def run(
        self,
        batch: Batch,
        step: int,
        *,
        importance_weights: torch.Tensor | None = None,
        start: float | None = None,
        advantages: torch.Tensor | None = None,
        admission: Any = None,
    ) -> StepResult:
        """The mechanism on ``batch``: weights (or a kept mask) for the loss, or an update of the train sampler.

        :param batch: the step's fields (:attr:`MountedStep.fields`) plus ``response_mask`` and optionally a
            bool ``is_padding`` ``(bs,)``; components see only the non-padding rows.
        :param importance_weights: ``(bs, L)`` weights the framework already applies; loss weights compose
            with them (:func:`~dataflex_core.step.weights.finalize`).
        :param start: ``time.perf_counter()`` when the host's hook began, so ``dataflex/hook_time_s`` counts
            the host's own I/O too.
        :param advantages: ``(bs, L)`` or ``(bs,)`` the framework's advantages when ``batch`` does not carry them
            (the compute counters count trained rows whose advantage is zero as wasted).
        :param admission: ``mechanism: filter``: the step's :class:`~dataflex_core.mechanisms.filter.AdmissionRounds`
            that built ``batch``.
        :raises InvalidOutputError: invalid plugin output, with ``on_invalid: raise``.
        """
        start = time.perf_counter() if start is None else start
        if advantages is None:
            advantages = batch.batch.get("advantages")
        #: read by mechanism filter's run, then cleared
        self.admission = admission
        idle = self.idle(step)
        if idle is not None:
            idle.update(self._count(batch, advantages, StepResult(idle)))
            return StepResult(idle)
        prepare_batch(batch)  # masks, token counts and uid groups: computed once for the whole step
        mechanism = self.mechanism
        empty = not bool(valid_token_mask(batch).any())
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
        result.metrics.update(self._count(batch, advantages, result))
        return result.timed(start)

    def _count(self, batch: Batch, advantages: torch.Tensor | None, result: StepResult) -> dict[str, float]:
        return self.count(
            batch.batch["response_mask"], advantages, is_padding=batch.batch.get("is_padding"), kept=result.kept,
            **result.compute,
        )  # fmt: skip


def _without_padding_field(batch: Batch) -> Batch:
    if "is_padding" not in batch.batch:
        return batch
    return Batch({k: v for k, v in batch.batch.items() if k != "is_padding"}, batch.non_tensor_batch, batch.meta_info)
