"""What a host can do, declared once for the mount-time checks that read it.

A host (verl, TRL, ...) describes itself with :class:`HostCapabilities`: the
loss units it has, whether per-token weights reach its loss, whether it can
drop rows from the loss, whether it can change which prompts are sampled (mix;
with ``pre_rollout`` among its timings, curriculum), whether every ``uid`` group is whole in the step's batch, and which canonical
fields (:mod:`dataflex_core.step.fields`) this run's configuration provides.
The runner's :func:`~dataflex_core.runner.check_pipeline` compares a built
pipeline with that declaration before the first rollout, so a pipeline that
could not work in this run fails in seconds with one error that says why and
what to change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .weights import LOSS_UNITS

#: ``HostCapabilities.drop_denominator`` values: the loss recounts the tokens of its mask, or divides by rows.
DROP_DENOMINATORS = ("tokens", "rows")


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
    :param drop_denominator: with ``hard_drop``, what the loss divides by once rows leave its mask: ``tokens``
        (it recounts the mask's tokens) or ``rows`` (a row count the drop does not change).
    :param recompute_advantage: group advantages can be recomputed on a selector's kept rows (the host
        does it when a step's result asks: ``StepResult.recompute_advantage``).
    :param refill: the host can generate further prompt batches within a step (``mechanism: filter``).
    :param refill_reason: without ``refill``, why not (for the refusal at mount).
    :param allocate: the host generates a per-prompt number of rollouts that the session gives it
        (``mechanism: allocate``).
    :param allocate_reason: without ``allocate``, why not (for the refusal at mount).
    :param resampling: the prompts sampled next can be changed (``mechanism: mix``, ``mechanism: curriculum``).
    :param checkpoints_sampler: the framework saves and restores the train sampler's state with its own
        checkpoints (verl's ``StatefulDataLoader``); otherwise the sampler restarts from the restored components.
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
    drop_denominator: str = "tokens"
    recompute_advantage: bool = False
    refill: bool = False
    refill_reason: str = ""
    allocate: bool = False
    allocate_reason: str = ""
    resampling: bool = False
    checkpoints_sampler: bool = False
    complete_groups: bool = True
    fields: Mapping[str, FieldSupport] = field(default_factory=dict)
    dataset_columns: bool = True
    timings: tuple[str, ...] = ("post_reward", "post_advantage")

    def __post_init__(self) -> None:
        if self.drop_denominator not in DROP_DENOMINATORS:
            raise ValueError(
                f"HostCapabilities(name={self.name!r}).drop_denominator={self.drop_denominator!r}; expected one of "
                f"{', '.join(DROP_DENOMINATORS)}"
            )
