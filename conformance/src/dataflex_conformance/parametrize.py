"""``parametrize_with_checks``: every conformance check as a pytest test with a readable id.

The plugin author's test module declares the components and, when a check
is known to fail, the reason::

    from dataflex_conformance import parametrize_with_checks

    @parametrize_with_checks(["my_scorer", MyReweighter(temperature=0.5)],
                             expected_failures={"check_constant_scores_uniform": "weights depend on length"})
    def test_conformance(dataflex_check, dataflex_fields):
        dataflex_check(fields=dataflex_fields)

Ids read ``my_scorer-check_output_shape[cpu-bs=1]``, so ``pytest -k`` selects
by component, check, device or case. The device set comes from
``$DATAFLEX_CONFORMANCE_DEVICE`` (``auto``, ``cpu`` or ``cuda``; default ``auto``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from .devices import resolve_devices
from .fields import FieldSynthesiser
from .probe import CheckFailure
from .runner import match_expected, unmatched_expected
from .subjects import Subject, expand_subjects
from .suite import CheckCall, iter_check_calls

#: Environment variable choosing the devices of ``parametrize_with_checks``.
ENV_DEVICE = "DATAFLEX_CONFORMANCE_DEVICE"


def _subject(item: Any) -> Subject:
    if isinstance(item, Subject):
        return item
    if isinstance(item, str):
        from dataflex_core import get_registry

        registry = get_registry()
        kinds = registry.find_kind(item)
        if not kinds:
            names = ", ".join(spec.name for spec in registry) or "none"
            raise ValueError(f"component {item!r} is not installed; installed components: {names}")
        clash = registry.clash(kinds[0], item)
        if clash is not None:
            raise ValueError(clash.message)
        return Subject.from_spec(registry.get(kinds[0], item))
    return Subject.from_component(item)


class _DeviceUnavailable:
    """Stands in for the checks of a device that is not there, and fails."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.id = "device-unavailable"

    def __call__(self, fields: Mapping[str, FieldSynthesiser] | None = None) -> None:
        raise CheckFailure(self.reason)


def check_calls(
    components: Iterable[Any],
    *,
    device: str | None = None,
    scorers: Iterable[Any] | None = None,
    fields: Mapping[str, FieldSynthesiser] | None = None,
) -> list[Any]:
    """The check calls for ``components`` (classes, instances, installed names or :class:`Subject`).

    Actuators are paired with ``scorers`` (default: the scorers among
    ``components``) whose granularity they accept, and with synthetic scores.
    """
    subjects = [_subject(c) for c in components]
    scorer_subjects = (
        [_subject(s) for s in scorers] if scorers is not None else [s for s in subjects if s.kind == "scorer"]
    )
    devices, problems = resolve_devices(device or os.environ.get(ENV_DEVICE, "auto"))
    calls: list[Any] = [_DeviceUnavailable(p) for p in problems]
    expanded, _ = expand_subjects(subjects, scorer_subjects)
    calls += iter_check_calls(expanded, devices, fields)
    return calls


def parametrize_with_checks(
    components: Iterable[Any],
    *,
    expected_failures: Mapping[str, str] | None = None,
    device: str | None = None,
    scorers: Iterable[Any] | None = None,
    fields: Mapping[str, FieldSynthesiser] | None = None,
):
    """A ``pytest.mark.parametrize`` over argument ``dataflex_check``, one param per check call.

    :param expected_failures: ``{key: reason}``; a key is a check name,
        ``<component>-<check>`` or a full id. Matching checks are marked
        ``xfail(reason)``; a key that matches nothing raises ``ValueError``.
    """
    import pytest

    expected = dict(expected_failures or {})
    calls = check_calls(components, device=device, scorers=scorers, fields=fields)
    real = [c for c in calls if isinstance(c, CheckCall)]
    unknown = unmatched_expected(real, expected)
    if unknown:
        raise ValueError(
            f"expected_failures key(s) {unknown} match no check; ids look like {real[0].id if real else '?'}"
        )
    params = []
    for call in calls:
        marks = []
        if isinstance(call, CheckCall):
            key = match_expected(call, expected)
            if key is not None:
                marks.append(pytest.mark.xfail(reason=expected[key], raises=AssertionError, strict=False))
        params.append(pytest.param(call, id=call.id, marks=marks))
    return pytest.mark.parametrize("dataflex_check", params)
