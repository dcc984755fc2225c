"""Certify installed plugins (or given components): discovery, running, and the report.

This is what the CLI and ``nox -s conformance`` call. It loads plugins
strictly enough to see failures (a plugin that cannot be imported, e.g.
because of an undeclared dependency, is reported as a failure of its
distribution, not skipped), pairs actuators with score sources, and runs
every check on every requested device.
"""

from __future__ import annotations

import importlib.metadata as importlib_metadata
from collections.abc import Mapping

from dataflex_core import ENTRY_POINT_GROUP, KINDS, get_plugin_manager
from dataflex_core.components import MECHANISM_KIND
from dataflex_core.distributions import canonical_name

from .checks_mechanism import MECHANISM_CHECKS, mechanism_problems
from .devices import resolve_devices
from .fields import FieldSynthesiser
from .report import PackageEntry, Report
from .runner import run_call, unmatched_expected
from .subjects import Subject, expand_subjects, subjects_from_registry
from .suite import ALL_CHECK_NAMES, iter_check_calls


def _package_entries(dists: list[str] | None, manager) -> list[PackageEntry]:
    registry = manager.registry()
    entries: dict[str, PackageEntry] = {}
    for spec in registry:
        if spec.dist:
            entry = entries.setdefault(canonical_name(spec.dist), PackageEntry(spec.dist, spec.version))
            entry.components.append(f"{spec.kind}:{spec.name}")
            if spec.kind == MECHANISM_KIND:  # its declarations; its behaviour is the host kit's, per seam
                entry.errors += mechanism_problems(spec.cls)
                entry.notes.append(
                    f"mechanism {spec.name}: declarations checked ({', '.join(MECHANISM_CHECKS)}); its behaviour is "
                    "certified per seam by the host kit of each host that runs it"
                )
            elif spec.kind not in KINDS:
                entry.notes.append(
                    f"{spec.kind} {spec.name}: kind {spec.kind!r} is declared by its distribution, which holds its "
                    "contract; conformance has no suite for it (test it with the mechanism that drives it)"
                )
    for clash in registry.clashes.values():
        for spec in clash.providers:
            if spec.dist:
                entry = entries.setdefault(canonical_name(spec.dist), PackageEntry(spec.dist, spec.version))
                entry.components.append(f"{spec.kind}:{spec.name}")
                entry.errors.append(f"name clash: {clash.message}")
    for failure in manager.all_failures:
        info = failure.plugin
        key = canonical_name(info.dist or info.name)
        entry = entries.setdefault(key, PackageEntry(info.dist or info.name, info.version))
        entry.errors.append(f"plugin failed to {failure.phase}: {failure.message}")
    if not dists:
        return list(entries.values())
    out = []
    for dist in dists:
        entry = entries.get(canonical_name(dist))
        if entry is None:
            try:
                found = importlib_metadata.distribution(dist)
            except importlib_metadata.PackageNotFoundError:
                entry = PackageEntry(dist, None, [], [f"distribution {dist!r} is not installed; pip install it first"])
            else:
                eps = [ep for ep in found.entry_points if ep.group == ENTRY_POINT_GROUP]
                why = (
                    f"its entry points in group {ENTRY_POINT_GROUP!r} registered no component"
                    if eps
                    else f"it publishes no entry point in group {ENTRY_POINT_GROUP!r} "
                    '([project.entry-points.dataflex] <name> = "<module>")'
                )
                entry = PackageEntry(found.metadata["Name"], found.version, [], [f"nothing to certify: {why}"])
        out.append(entry)
    return out


def certify_subjects(
    subjects: list[Subject],
    *,
    device: str = "auto",
    expected_failures: Mapping[str, str] | None = None,
    fields: Mapping[str, FieldSynthesiser] | None = None,
    scorers: list[Subject] | None = None,
    packages: list[PackageEntry] | None = None,
) -> Report:
    """Run every check on ``subjects`` (actuators get paired with ``scorers`` and synthetic scores)."""
    expected = dict(expected_failures or {})
    devices, errors = resolve_devices(device)
    if scorers is None:
        scorers = [s for s in subjects if s.kind == "scorer"]
    expanded, unpaired = expand_subjects(subjects, scorers)
    calls = iter_check_calls(expanded, devices, fields)
    unknown = unmatched_expected(calls, expected)
    for key in unknown:
        errors.append(
            f"expected failure {key!r} names no check that ran; use a check name ({', '.join(ALL_CHECK_NAMES)}) "
            "or '<component>-<check>' or a full check id"
        )
    results = [run_call(call, expected) for call in calls]
    return Report(device, devices, results, expanded, packages or [], errors, expected, unpaired)


def certify(
    dists: list[str] | None = None,
    *,
    device: str = "auto",
    expected_failures: Mapping[str, str] | None = None,
    fields: Mapping[str, FieldSynthesiser] | None = None,
    params: Mapping[str, list[dict]] | None = None,
) -> Report:
    """Certify the components of ``dists`` (every installed plugin when empty).

    :param device: ``auto`` (CPU and every CUDA device), ``cpu`` or ``cuda``.
    :param expected_failures: ``{check key: reason}``; a key is a check name,
        ``<component>-<check>``, ``<component>@<scores>-<check>`` or a full check id.
    :param fields: synthesisers for batch fields the suite does not know.
    :param params: component name -> list of param dicts to certify it with.
    """
    manager = get_plugin_manager()
    packages = _package_entries(dists, manager)
    components, scorers = subjects_from_registry(manager.registry(), dists, params)
    report = certify_subjects(
        components,
        device=device,
        expected_failures=expected_failures,
        fields=fields,
        scorers=scorers,
        packages=packages,
    )
    if not components and not any(p.errors or p.components for p in packages):
        report.errors.append("no dataflex components found to certify" + (f" in {', '.join(dists)}" if dists else ""))
    return report
