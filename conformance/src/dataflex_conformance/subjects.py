"""What gets certified: a component with its params, and for actuators the scores that feed it.

A scorer is certified alone. An actuator is certified once per source of
scores: every installed scorer whose granularity it accepts, plus one
synthetic source per accepted score shape, so a reweighter installed on its
own still meets constant, tied, huge, tiny and negative scores.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dataflex_core import KINDS, Component, ComponentSpec, Registry, accepted_params
from dataflex_core.distributions import canonical_name

from .batches import score_range_of
from .prompt_batches import is_prompt_world

#: Synthetic score sources: label -> the granularity whose shape they take.
SYNTHETIC_SOURCES = {"sample_scores": "prompt", "token_scores": "token", "domain_scores": "domain"}


def _format_params(params: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={v!r}" for k, v in sorted(params.items()))


@dataclass
class Subject:
    """One component (with params) to certify; actuators carry their score source."""

    kind: str
    name: str
    cls: type
    params: dict[str, Any] = field(default_factory=dict)
    dist: str | None = None
    version: str | None = None
    #: For actuators: the scorer subject feeding it, or a key of :data:`SYNTHETIC_SOURCES`.
    source: Subject | str | None = None

    @classmethod
    def from_spec(cls, spec: ComponentSpec, params: Mapping[str, Any] | None = None) -> Subject:
        return cls(spec.kind, spec.name, spec.cls, dict(params or {}), spec.dist, spec.version)

    @classmethod
    def from_component(cls, component: Component | type, params: Mapping[str, Any] | None = None) -> Subject:
        """From a class (with ``params``) or an instance (its params read back from its attributes)."""
        if isinstance(component, type):
            klass, values = component, dict(params or {})
        else:
            klass = type(component)
            values = {k: getattr(component, k) for k in accepted_params(klass) if hasattr(component, k)}
            values.update(params or {})
        return cls(klass.kind, klass.name or klass.__name__, klass, values)

    def make(self) -> Component:
        """A fresh instance, so state from one call never reaches another."""
        return self.cls(**self.params)

    def with_source(self, source: Subject | str) -> Subject:
        return Subject(self.kind, self.name, self.cls, dict(self.params), self.dist, self.version, source)

    @property
    def component_id(self) -> str:
        """``name`` or ``name(k=v)`` when params were given."""
        return f"{self.name}({_format_params(self.params)})" if self.params else self.name

    @property
    def id(self) -> str:
        """``softmax@advantage_magnitude``: the component and, for actuators, its score source."""
        if self.source is None:
            return self.component_id
        source = self.source if isinstance(self.source, str) else self.source.component_id
        return f"{self.component_id}@{source}"

    @property
    def granularity(self) -> str:
        """Granularity of the scores this subject produces (scorer) or consumes (actuator)."""
        if self.source is None:
            return self.cls.granularity
        if isinstance(self.source, str):
            return SYNTHETIC_SOURCES[self.source]
        return self.source.cls.granularity

    def describe(self) -> str:
        try:
            return self.make().describe()
        except Exception:  # noqa: BLE001 - describing must not hide the real failure
            return f"{self.name}({_format_params(self.params)})"

    @property
    def label(self) -> str:
        """``name (dist==version)`` as messages name a component from another package."""
        return f"{self.component_id} ({self.dist}=={self.version})" if self.dist else self.component_id

    def declared(self) -> Component:
        """The configured instance, whose ``requires`` and ``needs_groups`` are the ones hosts read.

        A component that cannot be built falls back to its class (the construction
        failure is reported by every check that builds it).
        """
        try:
            return self.make()
        except Exception:  # noqa: BLE001
            return self.cls

    @property
    def requires(self) -> list[str]:
        """Fields the batch must hold: this component's (as configured) and its score source's."""
        fields = list(self.declared().requires)
        if isinstance(self.source, Subject):
            fields += self.source.requires
        return fields


def synthetic_sources_for(actuator_cls: type) -> list[str]:
    """One synthetic source per score shape the actuator accepts (prompt/response share one)."""
    accepts = set(actuator_cls.accepts_granularity)
    out = []
    if accepts & {"prompt", "response"}:
        out.append("sample_scores")
    if "token" in accepts:
        out.append("token_scores")
    if "domain" in accepts:
        out.append("domain_scores")
    return out


def same_stage(actuator_cls: type, scorer_cls: type) -> bool:
    """True when both act on candidate prompts (a sampler and a ``pre_rollout`` scorer) or both on rollouts."""
    return is_prompt_world(actuator_cls) == is_prompt_world(scorer_cls)


def _range_text(score_range: tuple[float, float]) -> str:
    return f"[{score_range[0]:g}, {score_range[1]:g}]"


def pairing_problem(actuator_cls: type, scorer_cls: type) -> str | None:
    """Why ``scorer_cls`` cannot feed ``actuator_cls``, or ``None`` when it can.

    An actuator that declares ``score_range`` accepts only scorers whose own
    declared range lies inside it (a scorer without one may return any value);
    a sampler takes the scores of ``pre_rollout`` scorers, and no other actuator does.
    """
    if not same_stage(actuator_cls, scorer_cls):
        return "a sampler takes pre_rollout scores of candidate prompts, the other actuators scores of rollouts"
    if scorer_cls.granularity not in actuator_cls.accepts_granularity:
        return f"granularity {scorer_cls.granularity!r} not in accepts_granularity {actuator_cls.accepts_granularity}"
    accepted, produced = score_range_of(actuator_cls), score_range_of(scorer_cls)
    if produced[0] < accepted[0] or produced[1] > accepted[1]:
        declared = getattr(scorer_cls, "score_range", None)
        return f"accepts scores in {_range_text(accepted)}, but the scorer " + (
            f"declares score_range={_range_text(produced)}" if declared is not None else "declares no score_range"
        )
    return None


def expand_subjects(components: list[Subject], scorers: list[Subject]) -> tuple[list[Subject], list[str]]:
    """Scorers as they are; each actuator paired with every compatible scorer and synthetic source.

    :returns: ``(subjects, unpaired)`` where ``unpaired`` says which scorer of an
        accepted granularity was not paired with which actuator, and why.
    """
    out: list[Subject] = []
    unpaired: list[str] = []
    for subject in components:
        if subject.kind == "scorer":
            out.append(subject)
            continue
        for scorer in scorers:
            if scorer.cls.granularity not in subject.cls.accepts_granularity:
                continue
            if not same_stage(subject.cls, scorer.cls):
                continue  # not a pair to report as missing: they act at different points of the step

            problem = pairing_problem(subject.cls, scorer.cls)
            if problem is None:
                out.append(subject.with_source(scorer))
            else:
                unpaired.append(f"{subject.component_id} not paired with {scorer.component_id}: {problem}")
        for source in synthetic_sources_for(subject.cls):
            out.append(subject.with_source(source))
    return out, unpaired


def subjects_from_registry(
    registry: Registry, dists: list[str] | None = None, params: Mapping[str, list[dict]] | None = None
) -> tuple[list[Subject], list[Subject]]:
    """(components of ``dists`` or of every installed plugin, every installed scorer).

    ``params`` maps a component name to the param sets to certify it with
    (default: one set, the defaults).
    """
    wanted = {canonical_name(d) for d in dists} if dists else None
    params = params or {}
    components, scorers = [], []
    clashed = [spec for clash in registry.clashes.values() for spec in clash.providers]
    for spec in [*registry, *clashed]:  # a clashed name is still each plugin's component to certify
        if spec.dist is None:
            continue  # components defined outside any installed distribution
        if spec.kind not in KINDS:
            continue  # a mechanism, or a kind a distribution declares: no check suite of a shipped kind (certify.py)
        sets = params.get(spec.name) or [{}]
        subjects = [Subject.from_spec(spec, p) for p in sets]
        if spec.kind == "scorer":
            scorers.extend(subjects)
        if wanted is None or canonical_name(spec.dist) in wanted:
            components.extend(subjects)
    return components, scorers
