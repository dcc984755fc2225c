"""Base classes of the six component kinds, the table of every kind, and the checks on their declarations.

Hosts plan their work (which fields to fetch, whether groups are needed) from
a component's class attributes alone, so a wrong declaration is caught when the
class is defined rather than in the middle of a training run. A kind is its base
class: a :class:`Component` subclass that sets ``kind`` in its own body declares
that kind, so a distribution adds a kind with one class and its contract.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable
from typing import Any, ClassVar

import torch

from .errors import DeclarationError, UnknownParamError

TIMINGS = ("pre_rollout", "post_reward", "post_advantage", "in_loss")
GRANULARITIES = ("domain", "prompt", "response", "token")
#: Granularities whose scores have shape ``(bs,)``.
SAMPLE_GRANULARITIES = ("prompt", "response")
#: The component kinds dataflex-core ships, in the order users read them.
KINDS = ("scorer", "reweighter", "selector", "mixer", "sampler", "allocator")
#: The kind of a mechanism registered by a plugin (its base, ``dataflex_core.mechanisms.Mechanism``, declares it).
MECHANISM_KIND = "mechanism"
#: What a kind, a component or a mechanism may be named: a lower-case identifier (listings and locks print names as
#: given, so a newline or an escape sequence in one could forge a row).
_NAME = re.compile(r"[a-z][a-z0-9_]*")

#: Every declared kind -> its base class: the six above, ``mechanism``, and any kind a plugin's base class declares.
BASE_CLASSES: dict[str, type] = {}
#: Kind -> names only dataflex-core may register (the built-in mechanisms); a plugin registering one fails.
RESERVED_NAMES: dict[str, frozenset[str]] = {}


def declare_kind(kind: str, base: type, *, reserved: Iterable[str] = ()) -> None:
    """Make ``base`` the base class of ``kind``; ``reserved`` names stay dataflex-core's.

    :raises DeclarationError: ``kind`` is not a lower-case identifier, or another base already declares it.
    """
    if not is_component_name(kind):
        raise DeclarationError(
            f"{base.__qualname__}.kind = {kind!r} is not a kind name; write a lower-case identifier, e.g. kind = 'ranker'"
        )
    held = BASE_CLASSES.get(kind)
    if held is not None and held is not base and not redeclares(kind, base):
        raise DeclarationError(
            f"{base.__module__}.{base.__qualname__} declares kind {kind!r}, which "
            f"{base_label(held)} already declares; subclass it, or pick another kind name"
        )
    BASE_CLASSES[kind] = base
    if reserved:
        RESERVED_NAMES[kind] = frozenset(reserved)


def redeclares(kind: str, base: type) -> bool:
    """True when ``base`` is a new definition of the plugin base that holds ``kind`` (a re-imported module, a re-run
    cell: same module and name); never for a core kind, whose base is the object core defined."""
    held = BASE_CLASSES.get(kind)
    if held is None or kind in (*KINDS, MECHANISM_KIND):
        return False
    return (held.__module__, held.__qualname__) == (base.__module__, base.__qualname__)


def is_component_name(name: object) -> bool:
    """True for a lower-case identifier (``[a-z][a-z0-9_]*``), what a kind, a component or a mechanism may be named."""
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


def declared_kinds(kinds: Iterable[str]) -> list[str]:
    """``kinds`` in reading order: the shipped component kinds first, then the others sorted (stable listings)."""
    given = set(kinds)
    return [k for k in KINDS if k in given] + sorted(given - set(KINDS))


def _check_requires(cls: type, value: Any) -> None:
    if not isinstance(value, (list, tuple)) or not all(isinstance(f, str) for f in value):
        raise DeclarationError(
            f"{cls.__qualname__}.requires must be a list of field names (strings), "
            f"got {value!r}; write e.g. requires = ['advantages', 'response_mask']"
        )


def _check_choice(cls: type, attr: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise DeclarationError(f"{cls.__qualname__}.{attr} = {value!r} is not one of {', '.join(choices)}")


def _check_score_range(cls: type, value: Any) -> None:
    numbers = isinstance(value, tuple) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    if value is not None and not (numbers and len(value) == 2 and value[0] <= value[1]):
        raise DeclarationError(
            f"{cls.__qualname__}.score_range must be None or a (low, high) tuple of numbers with "
            f"low <= high, got {value!r}; write e.g. score_range = (0.0, 1.0)"
        )


def accepted_params(cls: type) -> dict[str, Any]:
    """Constructor parameters a user can set of ``cls`` (across its MRO) mapped to their defaults
    (``inspect.Parameter.empty`` when they have none)."""
    params: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        for p in inspect.signature(init).parameters.values():
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                params[p.name] = p.default
    return params


class Component:
    """Common base: parameter checking, identity and checkpoint state.

    Subclasses take their parameters as keyword arguments and pass the rest to
    ``super().__init__(**kwargs)``: whatever reaches this base is a parameter
    nobody accepted, an error rather than something to drop.
    """

    kind: ClassVar[str] = ""
    #: Batch fields the component reads (beyond ``response_mask``). One whose fields depend on its params (a
    #: ``reward_key``) sets ``self.requires`` in ``__init__``: hosts read the configured instance's.
    requires: list[str] = []
    #: True when the component reads the GRPO group ids (``uid``).
    needs_groups: ClassVar[bool] = False
    #: Set by the ``register_*`` decorators or the registry.
    name: ClassVar[str | None] = None
    #: ``(low, high)``: a scorer's valid scores stay in this range; an actuator accepts only scores in it
    #: (``ValueError`` outside), so a solve-rate reweighter pairs only with [0, 1] scorers. ``None``: any.
    score_range: ClassVar[tuple[float, float] | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        kind = cls.__dict__.get("kind")
        if kind == MECHANISM_KIND:  # its base is Mechanism, which is no Component
            raise DeclarationError(
                f"{cls.__qualname__}.kind = {kind!r}, but a mechanism subclasses "
                "dataflex_core.mechanisms.Mechanism, not a component base; subclass it"
            )
        if kind:  # a class that names its kind is that kind's base (or re-states an inherited one)
            held = BASE_CLASSES.get(kind)
            if held is None or redeclares(kind, cls):
                declare_kind(kind, cls)
            elif not issubclass(cls, held):
                raise DeclarationError(
                    f"{cls.__qualname__}.kind = {kind!r}, but it does not subclass {base_label(held)}, the base "
                    f"of that kind; subclass it"
                )
        _check_requires(cls, cls.requires)
        if not isinstance(cls.needs_groups, bool):
            raise DeclarationError(f"{cls.__qualname__}.needs_groups must be True or False, got {cls.needs_groups!r}")
        _check_score_range(cls, cls.score_range)
        cls._validate_declarations()

    @classmethod
    def _validate_declarations(cls) -> None:
        """Kind-specific declaration checks, run when each subclass is defined."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "requires":  # an instance's fields are checked like the class's
            _check_requires(type(self), value)
            value = list(value)
        super().__setattr__(name, value)

    def __init__(self, **kwargs: Any) -> None:
        if kwargs:
            accepted = sorted(accepted_params(type(self)))
            raise UnknownParamError(
                f"{type(self).__qualname__} got unknown param(s) {sorted(kwargs)}; "
                f"accepted params: {accepted or 'none'}"
            )

    def state_dict(self) -> dict[str, Any]:
        """State to save with a checkpoint (``{}``: stateless): tensors and plain data only, since checkpoints
        are read back with ``torch.load(weights_only=True)``; a numpy array goes in as a tensor."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned; a resumed run continues from it."""
        if state:
            raise ValueError(
                f"{type(self).__qualname__} is stateless but was given state with keys "
                f"{sorted(state)}; override load_state_dict to restore it"
            )

    def describe(self) -> str:
        """``name(param=value, ...)`` as used in error messages and reports."""
        params = ", ".join(f"{k}={getattr(self, k)!r}" for k in accepted_params(type(self)) if hasattr(self, k))
        return f"{self.name or type(self).__name__}({params})"


class Scorer(Component):
    """Turns batch signals into scores: ``(bs,)`` per sample or ``(bs, L)`` per token."""

    kind = "scorer"
    #: When in the training step the scores are computed.
    timing: ClassVar[str] = "post_advantage"
    #: ``prompt``/``response`` -> ``(bs,)``, ``token`` -> ``(bs, L)``, ``domain`` -> one per domain.
    granularity: ClassVar[str] = "prompt"

    @classmethod
    def _validate_declarations(cls) -> None:
        _check_choice(cls, "timing", cls.timing, TIMINGS)
        _check_choice(cls, "granularity", cls.granularity, GRANULARITIES)
        if cls.timing == "pre_rollout" and cls.granularity != "prompt":
            raise DeclarationError(
                f"{cls.__qualname__} has timing='pre_rollout' and granularity={cls.granularity!r}; a pre_rollout "
                "scorer scores candidate prompts before any response exists, one score per prompt: set "
                "granularity = 'prompt'"
            )

    def score(self, batch: Any, step_id: int, **ctx: Any):
        raise NotImplementedError(f"{type(self).__qualname__} must implement score(batch, step_id, **ctx)")

    def observe(self, outcomes: Any, step_id: int, **ctx: Any) -> None:
        """Record a finished step's outcomes (``pre_rollout`` scorers; the default records nothing).

        ``outcomes`` holds one row per prompt rolled out in step ``step_id``, with the fields of
        :data:`dataflex_core.step.OUTCOME_FIELDS`. It is called after every step, before the next prompts
        are scored, so a scorer can keep per-prompt statistics (an EMA, a posterior) in its ``state_dict``.
        """

    def next_draw_size(
        self, *, missing_groups: int, zero_variance_groups: int, groups: int, rollout_n: int, default_size: int
    ) -> int | None:
        """The prompts of a step's next refill round, for a ``pre_rollout`` scorer drawing them (``filter.draw``).

        Called after each round that left the batch short: ``missing_groups`` still to admit; of the round's
        ``groups``, ``zero_variance_groups`` whose responses all got one reward; ``rollout_n`` responses per prompt;
        ``default_size`` the batch's prompts. Returns a whole number in ``[1, the dataset's rows]``; ``None`` (the
        default): ``default_size``.
        """
        return None


class Actuator(Component):
    """Base of the four actuators: they turn scores into an action (weights, a selection, proportions, probabilities)."""

    #: Scorer granularities this actuator can consume.
    accepts_granularity: ClassVar[tuple[str, ...]] = GRANULARITIES

    @classmethod
    def _validate_declarations(cls) -> None:
        acc = cls.accepts_granularity
        if isinstance(acc, str) or not all(g in GRANULARITIES for g in acc):
            raise DeclarationError(
                f"{cls.__qualname__}.accepts_granularity must be a tuple drawn from "
                f"{', '.join(GRANULARITIES)}, got {acc!r}"
            )

    def act(self, scores: Any, batch: Any, **ctx: Any):
        raise NotImplementedError(f"{type(self).__qualname__} must implement act(scores, batch, **ctx)")


class Reweighter(Actuator):
    """Scores -> loss weights, non-negative, finite, mean one over valid units: ``(bs,)`` from per-sample
    scores; a token-level reweighter, returning ``(bs, L)``, declares ``accepts_granularity = ("token",)``."""

    kind = "reweighter"
    accepts_granularity: ClassVar[tuple[str, ...]] = ("prompt", "response")


class Selector(Actuator):
    """Scores -> kept sample indices (LongTensor) or a 0/1 mask of shape ``(bs,)``."""

    kind = "selector"
    accepts_granularity: ClassVar[tuple[str, ...]] = ("prompt", "response")
    #: True asks the host for group advantages computed as if only the kept rows had been sampled (GFPO, PODS).
    #: Instances may set it from a param; hosts read the configured instance.
    recompute_advantage: bool = False
    #: True promises that, on scores equal within each GRPO group, it keeps or drops each group whole, so
    #: ``mechanism: filter`` can admit groups with it (conformance certifies it). A band on the scores keeps
    #: the promise; a top-k does not.
    admits_groups: ClassVar[bool] = False


class Mixer(Actuator):
    """Per-domain scores -> domain sampling proportions, non-negative, summing to one: :meth:`act` on update
    steps (every ``update_step``), :meth:`observe` on the steps in between."""

    kind = "mixer"
    accepts_granularity: ClassVar[tuple[str, ...]] = ("domain", "prompt", "response")

    def observe(self, scores: Any, batch: Any, **ctx: Any) -> None:
        """Record one step's signal without proposing proportions (``ctx`` as :meth:`act` gets it); the default
        records nothing."""

    def current_proportions(self, domains: Any) -> torch.Tensor:
        """The proportions in effect, ``(D,)`` summing to one, without observing anything; default uniform."""
        return torch.full((len(domains),), 1.0 / len(domains), dtype=torch.float32)


class Sampler(Actuator):
    """Scores of candidate prompts -> the probabilities of drawing each, non-negative, summing to one.

    ``mechanism: curriculum`` scores the candidates with a ``pre_rollout`` scorer before a batch is drawn, and
    draws each candidate ``batch_size * p`` times in expectation.
    """

    kind = "sampler"
    accepts_granularity: ClassVar[tuple[str, ...]] = ("prompt",)

    def min_probability(self, num_candidates: int) -> float:
        """The least probability :meth:`act` gives any of ``num_candidates`` candidates, whatever the scores: a
        positive floor means no prompt is starved (conformance checks it). The default, 0, promises nothing."""
        return 0.0


class Allocator(Actuator):
    """Scores of a step's prompts -> how many rollouts each gets: ``(n,)`` int64 summing to the keyword
    ``budget``, each in ``[n_min, n_max]`` (``mechanism: allocate``; :func:`~dataflex_core.contracts.check_allocation`).
    """

    kind = "allocator"
    accepts_granularity: ClassVar[tuple[str, ...]] = ("prompt",)

    def min_rollouts(self, n_min: int, num_prompts: int, budget: int) -> int:
        """The fewest rollouts :meth:`act` gives any prompt, whatever the scores (conformance checks it); the
        default is ``n_min``, the least the contract allows."""
        return int(n_min)


def declared_fields(component: Component) -> list[str]:
    """Batch fields a configured component reads: ``response_mask``, its ``requires``, and ``uid`` for groups.
    Everything that plans what to hand a component (a host's fetch, conformance) asks this."""
    fields = ["response_mask", *component.requires]
    if component.needs_groups:
        fields.append("uid")
    return list(dict.fromkeys(fields))


def base_label(base: type) -> str:
    """How messages name a kind's base: ``dataflex_core.Scorer`` for core's, ``module.Class`` for a plugin's."""
    if any(BASE_CLASSES.get(kind) is base for kind in KINDS):
        return f"dataflex_core.{base.__name__}"
    return f"{base.__module__}.{base.__qualname__}"


def kind_of(cls: object) -> str | None:
    """The kind ``cls`` is, read from its nearest base class in :data:`BASE_CLASSES` (None if it has none), so
    one registration hook serves every kind."""
    if not isinstance(cls, type):
        return None
    by_base = {base: kind for kind, base in BASE_CLASSES.items()}
    for klass in cls.__mro__:
        if klass in by_base:
            return by_base[klass]
    return None
