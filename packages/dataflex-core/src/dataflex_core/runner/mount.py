"""Mount the ``dataflex:`` block against a host: resolve its mechanism once, build its pipeline, check it.

Everything a user can get wrong in the block is found here, before the first rollout, with one clear
error on the first problem: the host's keys (:func:`host_settings`), a key only another mechanism reads,
the pipeline itself (:func:`~dataflex_core.config.build_pipeline`, for the actuator kind the mechanism
drives), and whether this host can run it (:func:`~dataflex_core.runner.check.check_pipeline`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..block import HOST_KEYS, DataFlexBlock, check_block_keys, read_block
from ..config import DataFlexPipeline, build_pipeline
from ..errors import ConfigError
from ..mechanisms.base import Mechanism
from ..mechanisms.registry import get_mechanism, mechanisms
from ..step.host import HostCapabilities
from .check import check_pipeline

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
    #: The mechanisms this one drives, by role (:meth:`~dataflex_core.mechanisms.Mechanism.nested`), mounted
    #: against the same host.
    nested: dict[str, MountedStep] = field(default_factory=dict)

    @property
    def settings(self) -> Any:
        """The mechanism's parsed block keys (e.g. ``MixSettings``), ``None`` for mechanisms without keys."""
        return self.mechanism.settings

    def describe(self) -> str:
        p = self.pipeline
        host_ctx = ", ".join(f"{k}={v}" for k, v in self.ctx.items() if k != "loss_unit")
        unit = f"mean one per {self.loss_unit}" + (f" ({host_ctx})" if host_ctx else "")
        return (
            f"{p.mechanism}: scorer {p.scorer_spec.label} -> {p.actuator_spec.kind} {p.actuator_spec.label}; "
            f"{unit}, warmup_step={p.warmup_step}, on_invalid={self.on_invalid}, reads {self.fields}"
        ) + "".join(
            f"; {self.mechanism.describe_nested(role, inner.describe())}" for role, inner in self.nested.items()
        )


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

    The block is read once and its mechanism resolved once; the pipeline is built for the actuator kind
    that mechanism drives.

    :param loss_unit: the unit of this run's loss (``token`` or ``sequence``).
    :param ctx: the host's own context for components (``loss_unit`` is added).
    :param adv_estimator: the host's advantage estimator, for the ``needs_groups`` check.
    :param is_group_estimator: the host's answer to "does this estimator use ``uid`` groups?".
    :param extra_keys: further block keys the host reads itself.
    """
    if not isinstance(block, DataFlexBlock):
        block = read_block(block)
    if block is None:
        raise ConfigError("the dataflex block is empty; give at least scorer and actuator")
    owners = mechanism_keys()
    known = (*HOST_KEYS, *owners, *extra_keys)
    check_block_keys(block, known)
    cls = get_mechanism(block.mechanism)
    host = host.within(cls.seams)  # where a seam runs the step with other fields (verl's legacy rounds)
    pipeline = build_pipeline(
        block,
        actuator_kind=cls.actuator_kind,
        adv_estimator=adv_estimator,
        is_group_estimator=is_group_estimator,
        extra_keys=known,
    )
    stray = sorted(k for k, names in owners.items() if k in pipeline.extra and pipeline.mechanism not in names)
    if stray:
        readers = " or ".join(owners[stray[0]])
        raise ConfigError(
            f"dataflex.{stray[0]} is read only by mechanism: {readers}, but dataflex.mechanism="
            f"{pipeline.mechanism!r}; remove {[k for k in stray if owners[k] == owners[stray[0]]]} or set "
            f"mechanism: {owners[stray[0]][0]}"
        )
    mechanism = cls(block.keys)
    check_pipeline(pipeline, host, loss_unit=loss_unit, mechanism=mechanism)
    grouped = None
    if adv_estimator is not None and is_group_estimator is not None:
        grouped = is_group_estimator(adv_estimator)
    mechanism.mount(pipeline, host, grouped=grouped)
    nested = {
        role: mount_step(
            inner,
            host,
            loss_unit=loss_unit,
            ctx=ctx,
            adv_estimator=adv_estimator,
            is_group_estimator=is_group_estimator,
            extra_keys=extra_keys,
        )  # fmt: skip
        for role, inner in mechanism.nested().items()
    }
    fields = [*mechanism.fields(pipeline), *(name for inner in nested.values() for name in inner.fields)]
    return MountedStep(
        pipeline=pipeline,
        host=host,
        mechanism=mechanism,
        on_invalid=block.on_invalid,
        loss_unit=loss_unit,
        fields=list(dict.fromkeys(fields)),
        ctx={**(ctx or {}), "loss_unit": loss_unit},
        call_budget_s=block.call_budget_s,
        nested=nested,
    )
