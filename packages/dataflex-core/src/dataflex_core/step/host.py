"""What a host can do, declared once for the mount-time checks that read it.

:func:`~dataflex_core.runner.check_pipeline` compares a built pipeline with the host's :class:`HostCapabilities` before
the first rollout, so a pipeline that cannot work in this run fails in seconds with one error that says why and what to
change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from .seams import LossWeights, Seam
from .weights import LOSS_UNITS

#: ``HostCapabilities.drop_denominator`` values: the loss recounts the tokens of its mask, or divides by rows.
DROP_DENOMINATORS = ("tokens", "rows")


@dataclass(frozen=True)
class FieldSupport:
    """Whether this run provides a canonical field, and what to change when it does not."""

    provided: bool
    fix: str = ""


@dataclass(frozen=True)
class SeamSupport:
    """Whether this run's host provides a seam, and why not when it does not (the refusal at mount says it).

    :param fields: the fields of the step where this seam runs it with other ones than the host's (verl's legacy rounds,
        before advantages exist); ``None``: the host's. :param timings: likewise, the scorer timings.
    :param mixed_counts: one generation call can roll different prompts out different numbers of times (a staged
        host without it gets one call per rollout count).
    """

    provided: bool
    reason: str = ""
    fields: Mapping[str, FieldSupport] | None = None
    timings: tuple[str, ...] | None = None
    mixed_counts: bool = True


@dataclass(frozen=True)
class HostCapabilities:
    """A host's declaration, for this run's configuration.

    :param name: the framework and its tested range as users know it, e.g. ``"TRL 1.16"``.
    :param seams: seam -> :class:`SeamSupport` for this run (:mod:`dataflex_core.step.seams`); a seam not listed is one
        this host does not provide. Default: the loss weights only.
    :param loss_units: units the framework's loss can average over (``token``, ``sequence``).
    :param token_weights: per-token weights reach the loss (token-granularity reweighting).
    :param hard_drop: rows can be removed from the loss, mask and denominator.
    :param drop_denominator: with ``hard_drop``, what the loss divides by: ``tokens`` (it recounts the mask) or ``rows``
        (a count the drop does not change).
    :param recompute_advantage: group advantages can be recomputed on a selector's kept rows.
    :param checkpoints_sampler: the framework checkpoints the train sampler's state (verl's ``StatefulDataLoader``);
        otherwise the sampler restarts from the restored components.
    :param complete_groups: every ``uid`` group is whole in the batch handed to components.
    :param fields: canonical field -> :class:`FieldSupport`; a field not listed is never provided.
    :param dataset_columns: names outside the vocabulary are dataset columns the host passes through.
    :param timings: scorer timings the host runs: ``post_reward`` / ``post_advantage`` in the step, ``pre_rollout`` in
        its train sampler (``mechanism: curriculum``).
    """

    name: str
    loss_units: tuple[str, ...] = LOSS_UNITS
    token_weights: bool = True
    hard_drop: bool = False
    drop_denominator: str = "tokens"
    recompute_advantage: bool = False
    seams: Mapping[type[Seam], SeamSupport] = field(default_factory=lambda: {LossWeights: SeamSupport(True)})
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
        seams = dict(self.seams)
        for seam in seams:
            if not (isinstance(seam, type) and issubclass(seam, Seam)):
                raise TypeError(
                    f"HostCapabilities(name={self.name!r}).seams has the key {seam!r}; the keys are seam classes "
                    "of dataflex_core.step.seams, e.g. {GenerationRounds: SeamSupport(True)}"
                )
        object.__setattr__(self, "seams", seams)

    def support(self, seam: type[Seam]) -> SeamSupport:
        """Whether this host provides ``seam``, and why not (a seam it does not list: not provided, no reason)."""
        return self.seams.get(seam, SeamSupport(False))

    def provides(self, seam: type[Seam]) -> bool:
        """True when this host provides ``seam``."""
        return self.support(seam).provided

    def within(self, seams: Iterable[type[Seam]]) -> HostCapabilities:
        """This host as a mechanism needing ``seams`` has it: the fields and timings of a seam that runs the step with
        other ones (:attr:`SeamSupport.fields`, :attr:`SeamSupport.timings`) replace the host's."""
        host = self
        for seam in seams:
            support = self.support(seam)
            if support.provided and support.fields is not None:
                host = replace(host, fields=support.fields)
            if support.provided and support.timings is not None:
                host = replace(host, timings=support.timings)
        return host
