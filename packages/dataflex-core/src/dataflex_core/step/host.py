"""What a host can do, declared once, and the mount-time checks that read the declaration.

A host (verl, TRL, ...) describes itself with :class:`HostCapabilities`: the
loss units it has, whether per-token weights reach its loss, whether it can
drop rows from the loss, whether it can change which prompts are sampled (mix;
with ``pre_rollout`` among its timings, curriculum), whether every ``uid`` group is whole in the step's batch, and which canonical
fields (:mod:`dataflex_core.step.fields`) this run's configuration provides.
:func:`check_pipeline` compares a built pipeline with that declaration before
the first rollout, so a pipeline that could not work in this run fails in
seconds with one error that says why and what to change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..config import DataFlexPipeline
from ..errors import ConfigError, IncompatibleComponentError
from .curriculum import check_components
from .fields import is_canonical
from .runners import RUNNERS, WEIGHTLESS_MECHANISMS
from .weights import LOSS_UNITS


@dataclass(frozen=True)
class FieldSupport:
    """Whether this run provides a canonical field, and what to change when it does not."""

    provided: bool
    fix: str = ""


@dataclass(frozen=True)
class HostCapabilities:
    """A host's declaration, for this run's configuration.

    :param name: the framework and its tested range as users know it, e.g. ``"TRL 1.16"``.
    :param loss_units: units the framework's loss can average over (``token``, ``sequence``).
    :param token_weights: per-token weights reach the loss (token-granularity reweighting).
    :param hard_drop: rows can be removed from the loss, mask and denominator (select with
        ``recompute_advantage``).
    :param recompute_advantage: group advantages can be recomputed on a selector's kept rows.
    :param resampling: the prompts sampled next can be changed (``mechanism: mix``, ``mechanism: curriculum``).
    :param complete_groups: every ``uid`` group is whole in the batch handed to components.
    :param fields: canonical field -> :class:`FieldSupport` for this run. A canonical field not listed
        is one this host never provides.
    :param dataset_columns: names outside the vocabulary are dataset columns the host passes through.
    :param timings: scorer timings the host runs: ``post_reward`` / ``post_advantage`` in the step,
        ``pre_rollout`` in its train sampler (``mechanism: curriculum``).
    """

    name: str
    loss_units: tuple[str, ...] = LOSS_UNITS
    token_weights: bool = True
    hard_drop: bool = False
    recompute_advantage: bool = False
    resampling: bool = False
    complete_groups: bool = True
    fields: Mapping[str, FieldSupport] = field(default_factory=dict)
    dataset_columns: bool = True
    timings: tuple[str, ...] = ("post_reward", "post_advantage")


def check_pipeline(pipeline: DataFlexPipeline, host: HostCapabilities, *, loss_unit: str | None = None) -> None:
    """Raise one clear error if ``pipeline`` cannot run on ``host`` as configured.

    :param loss_unit: the unit of this run's loss, when the mechanism writes weights.
    :raises ConfigError: an unsupported mechanism or loss unit.
    :raises IncompatibleComponentError: a capability or field the pipeline needs and this run lacks.
    """
    mechanism = pipeline.mechanism
    if mechanism not in RUNNERS and mechanism not in WEIGHTLESS_MECHANISMS:
        raise ConfigError(
            f"dataflex.mechanism={mechanism!r} is not supported by {host.name}; "
            f"supported: {', '.join((*RUNNERS, *WEIGHTLESS_MECHANISMS))}"
        )
    if mechanism == "mix" and not host.resampling:
        raise IncompatibleComponentError(
            f"dataflex.mechanism=mix changes which prompts are sampled, but {host.name} cannot resample in this "
            "configuration; use mechanism reweight or select"
        )
    if mechanism in RUNNERS and loss_unit is not None and loss_unit not in host.loss_units:
        raise ConfigError(f"{host.name} has no loss unit {loss_unit!r}; its units: {', '.join(host.loss_units)}")
    timing = pipeline.scorer.timing
    if mechanism == "curriculum" or timing == "pre_rollout":
        check_curriculum(pipeline, host)
        return
    if timing not in host.timings:
        raise IncompatibleComponentError(
            f"scorer {pipeline.scorer_spec.label} has timing={timing!r}, but {host.name} runs scorers once the "
            f"rewards and advantages exist ({', '.join(t for t in host.timings if t != 'pre_rollout')}); a {timing} "
            f"scorer cannot run in mechanism {mechanism!r}. Pick a scorer with one of those timings"
        )
    if mechanism == "reweight" and pipeline.scorer.granularity == "token" and not host.token_weights:
        raise IncompatibleComponentError(
            f"scorer {pipeline.scorer_spec.label} gives token-level scores, but {host.name} applies one weight per "
            "sample; pick a prompt- or response-level scorer"
        )
    if pipeline.needs_groups and not host.complete_groups:
        owner = pipeline.scorer_spec if pipeline.scorer.needs_groups else pipeline.actuator_spec
        raise IncompatibleComponentError(
            f"{owner.kind} {owner.label} needs whole GRPO groups (needs_groups=True), but {host.name} hands "
            "components partial groups in this configuration"
        )
    check_fields(pipeline, host)


def check_curriculum(pipeline: DataFlexPipeline, host: HostCapabilities) -> None:
    """``mechanism: curriculum`` and ``pre_rollout`` scorers go together, on a host that can run them."""
    spec, timing = pipeline.scorer_spec, pipeline.scorer.timing
    if pipeline.mechanism != "curriculum":
        raise IncompatibleComponentError(
            f"scorer {spec.label} has timing='pre_rollout': it scores candidate prompts before rollout, which only "
            f"mechanism 'curriculum' does, not {pipeline.mechanism!r}; set mechanism: curriculum with a sampler, or "
            "pick a scorer with timing post_reward or post_advantage"
        )
    if timing != "pre_rollout":
        raise IncompatibleComponentError(
            f"mechanism curriculum scores candidate prompts before rollout, but scorer {spec.label} has "
            f"timing={timing!r} (it needs the step's rollouts); pick a scorer with timing='pre_rollout'"
        )
    if "pre_rollout" not in host.timings or not host.resampling:
        raise IncompatibleComponentError(
            f"mechanism curriculum chooses which prompts are sampled, but {host.name} cannot run pre_rollout "
            "scorers in its train sampler in this configuration; use mechanism reweight, select or mix"
        )
    check_components(pipeline, host.name)


def check_fields(pipeline: DataFlexPipeline, host: HostCapabilities) -> None:
    """Every field the configured scorer and actuator read must be one this run provides."""
    owners = [(pipeline.scorer_spec, pipeline.scorer), (pipeline.actuator_spec, pipeline.actuator)]
    for spec, component in owners:
        for name in component.requires:  # the configured instance: a param may change what it reads
            support = host.fields.get(name)
            if support is not None:
                if not support.provided:
                    raise IncompatibleComponentError(
                        f"{spec.kind} {spec.label} requires the field {name!r}, which this {host.name} "
                        f"configuration does not provide: {support.fix}"
                    )
            elif is_canonical(name):
                raise IncompatibleComponentError(
                    f"{spec.kind} {spec.label} requires the field {name!r}, which {host.name} never provides; "
                    f"it provides {', '.join(sorted(n for n, s in host.fields.items() if s.provided))}"
                )
            elif not host.dataset_columns:
                raise IncompatibleComponentError(
                    f"{spec.kind} {spec.label} requires {name!r}, which is not a canonical field, and {host.name} "
                    "passes no dataset columns to components"
                )
