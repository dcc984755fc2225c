"""Build a scorer and an actuator from the read ``dataflex:`` block (:class:`~dataflex_core.block.DataFlexBlock`).

Every mistake a user can make in the components is reported here, before any training step runs, with the fix: an
unknown component or param (with the closest name), an ill-typed param, an actuator of the wrong kind or granularity, a
group-based component under a non-group advantage estimator.
"""

from __future__ import annotations

import difflib
import inspect
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .block import DataFlexBlock
from .components import Actuator, Scorer, accepted_params, declared_fields
from .errors import (
    ConfigError,
    IncompatibleComponentError,
    ParamTypeError,
    UnknownComponentError,
    UnknownParamError,
)
from .lock.enforce import get_plugin_manager
from .registry import ComponentSpec, Registry


class GroupsUncheckedWarning(UserWarning):
    """A component needs ``uid`` groups, but the estimator is unknown or not given, so it was not checked."""


@dataclass
class DataFlexPipeline:
    """The built ``dataflex:`` block: what a host runs each step."""

    mechanism: str
    scorer: Scorer
    actuator: Actuator
    warmup_step: int
    scorer_spec: ComponentSpec
    actuator_spec: ComponentSpec
    scorer_params: dict[str, Any] = field(default_factory=dict)
    actuator_params: dict[str, Any] = field(default_factory=dict)
    #: Keys of the block a host declared through ``extra_keys`` (left unparsed here).
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def needs_groups(self) -> bool:
        return bool(self.scorer.needs_groups or self.actuator.needs_groups)

    @property
    def requires(self) -> list[str]:
        """Every batch field scorer and actuator read, plus ``response_mask`` (and ``uid`` for groups)."""
        return list(dict.fromkeys([*declared_fields(self.scorer), *declared_fields(self.actuator)]))

    def active(self, step: int) -> bool:
        """True once ``step`` has reached ``warmup_step``."""
        return step >= self.warmup_step


def _component_entry(block: Mapping[str, Any], role: str) -> tuple[str, dict[str, Any]]:
    entry = block.get(role)
    if entry is None:
        raise ConfigError(f"dataflex.{role} is missing; write e.g. {role}: {{name: ..., params: {{}}}}")
    if isinstance(entry, str):
        return entry, {}
    if not isinstance(entry, Mapping):
        raise ConfigError(f"dataflex.{role} must be a mapping with 'name' and 'params', got {entry!r}")
    unknown = set(entry) - {"name", "params"}
    if unknown:
        raise ConfigError(
            f"dataflex.{role} has unknown key(s) {sorted(unknown)}; accepted keys: name, params "
            f"(component parameters go under {role}.params)"
        )
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"dataflex.{role}.name must be a component name, got {name!r}")
    params = entry.get("params") or {}
    if not isinstance(params, Mapping):
        raise ConfigError(f"dataflex.{role}.params must be a mapping, got {params!r}")
    return name, dict(params)


def _lookup(
    registry: Registry, kind: str, name: str, role: str, failures: Iterable[Any], lock_note: str | None = None
) -> ComponentSpec:
    spec = registry.require(kind, name)  # a name two plugins register raises DuplicateComponentError
    if spec is not None:
        return spec
    installed = f"installed {kind}s: {', '.join(registry.names(kind)) or 'none'}"
    other = [k for k in registry.find_kind(name) if k != kind]
    if other:
        raise IncompatibleComponentError(
            f"dataflex.{role} {name!r} is a {other[0]}, but this mechanism needs a {kind}; {installed}"
        )
    close = registry.close_match(kind, name)
    message = f"{kind} {name!r} is not {'in the locked plugin set' if lock_note else 'installed'}"
    message += (f"; did you mean {close!r}?" if close else "") + f"; {installed}"
    failures = list(failures)
    for failure in failures:
        message += f"\n  note: {failure.message} (it may provide {name!r})"
    if lock_note:
        message += f"\n  note: {lock_note}"
    elif not failures:
        message += (
            f". Install the package that provides it into the environment this runs in ({sys.prefix}): "
            f"`{sys.executable} -m pip install ...`, then check `dataflex plugins` there"
        )
    error = UnknownComponentError(message)
    if len(failures) == 1:
        raise error from failures[0].error
    raise error


def _type_ok(default: Any, value: Any) -> bool:
    if default is inspect.Parameter.empty or default is None or value is None:
        return True
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, (int, float)):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, str):
        return isinstance(value, str)
    if isinstance(default, (list, tuple)):
        return isinstance(value, (list, tuple))
    if isinstance(default, Mapping):
        return isinstance(value, Mapping)
    return True


def check_params(spec: ComponentSpec, params: Mapping[str, Any], role: str) -> None:
    """Raise :class:`UnknownParamError` for unknown or missing params, :class:`ParamTypeError` for ill-typed ones."""
    accepted = accepted_params(spec.cls)
    shown = (
        ", ".join(f"{k}={v!r}" if v is not inspect.Parameter.empty else f"{k} (required)" for k, v in accepted.items())
        or "none"
    )
    for key in params:
        if key not in accepted:
            close = difflib.get_close_matches(key, list(accepted), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise UnknownParamError(
                f"dataflex.{role}.params: {spec.kind} {spec.name!r} has no param {key!r}{hint}; accepted params: {shown}"
            )
    for key, default in accepted.items():
        if default is inspect.Parameter.empty and key not in params:
            raise UnknownParamError(
                f"dataflex.{role}.params: {spec.kind} {spec.name!r} needs param {key!r}; accepted params: {shown}"
            )
        if key in params and not _type_ok(default, params[key]):
            raise ParamTypeError(
                f"dataflex.{role}.params.{key}={params[key]!r} has type {type(params[key]).__name__}, "
                f"but {spec.kind} {spec.name!r} expects {type(default).__name__} (default {default!r})"
            )


def instantiate(spec: ComponentSpec, params: Mapping[str, Any], role: str) -> Any:
    """Check ``params`` and construct the component, naming it in any error."""
    check_params(spec, params, role)
    try:
        return spec.cls(**params)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"dataflex.{role} {spec.label} rejected params {dict(params)}: {exc}") from exc


def build_pipeline(
    block: DataFlexBlock,
    *,
    actuator_kind: str,
    adv_estimator: str | None = None,
    is_group_estimator: Callable[[str], bool | None] | None = None,
    extra_keys: Iterable[str] = (),
    registry: Registry | None = None,
) -> DataFlexPipeline:
    """Build the scorer and the actuator a read ``dataflex:`` block describes, the actuator of kind ``actuator_kind``
    (the mechanism's to say).

    :param adv_estimator: the host's advantage estimator, for the ``needs_groups`` check; ``None`` skips it.
    :param is_group_estimator: the host's answer to "does this estimator use ``uid`` groups?" (``None`` when it cannot
        tell): each host knows its own framework's estimators. Without it a ``needs_groups`` component only warns.
    :param extra_keys: block keys the host reads itself (kept in ``.extra``).
    :param registry: components to build from; defaults to the installed plugins.
    """
    manager = get_plugin_manager() if registry is None else None
    registry = registry if registry is not None else manager.registry()
    failures = manager.all_failures if manager is not None else []
    lock_note = manager.locked_out_note() if manager is not None else None

    scorer_name, scorer_params = _component_entry(block.keys, "scorer")
    actuator_name, actuator_params = _component_entry(block.keys, "actuator")
    scorer_spec = _lookup(registry, "scorer", scorer_name, "scorer", failures, lock_note)
    actuator_spec = _lookup(registry, actuator_kind, actuator_name, "actuator", failures, lock_note)

    granularity = scorer_spec.cls.granularity
    accepts = actuator_spec.cls.accepts_granularity
    if granularity not in accepts:
        raise IncompatibleComponentError(
            f"scorer {scorer_name!r} gives {granularity}-level scores, but {actuator_kind} "
            f"{actuator_name!r} accepts only {', '.join(accepts)}; pick a scorer of that granularity"
        )

    grouped = None
    if adv_estimator is not None:
        grouped = is_group_estimator(adv_estimator) if is_group_estimator is not None else None
    for spec in (scorer_spec, actuator_spec):
        if spec.cls.needs_groups and grouped is None:
            if adv_estimator is None:
                seen = "no advantage estimator was given"
            elif is_group_estimator is None:
                seen = (
                    f"no host said whether the advantage estimator {adv_estimator!r} groups rows (is_group_estimator)"
                )
            else:
                seen = f"the advantage estimator {adv_estimator!r} is not one the host knows"
            warnings.warn(
                f"{spec.kind} {spec.name!r} needs GRPO groups (needs_groups=True), but {seen}, so whether "
                "rows are grouped by uid cannot be checked; use a group estimator such as grpo or rloo "
                "(a host can pass is_group_estimator= for its own estimators)",
                GroupsUncheckedWarning,
                stacklevel=2,
            )
        if spec.cls.needs_groups and grouped is False:
            raise IncompatibleComponentError(
                f"{spec.kind} {spec.name!r} needs GRPO groups (needs_groups=True), but "
                f"algorithm.adv_estimator={adv_estimator!r} does not group samples by uid; "
                "use a group estimator such as grpo or rloo, or a scorer without needs_groups"
            )

    scorer = instantiate(scorer_spec, scorer_params, "scorer")
    actuator = instantiate(actuator_spec, actuator_params, "actuator")
    return DataFlexPipeline(
        mechanism=block.mechanism,
        scorer=scorer,
        actuator=actuator,
        warmup_step=block.warmup_step,
        scorer_spec=scorer_spec,
        actuator_spec=actuator_spec,
        scorer_params=scorer_params,
        actuator_params=actuator_params,
        extra={k: block.keys[k] for k in extra_keys if k in block.keys},
    )
