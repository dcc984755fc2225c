"""The plugin set as installed, with the components each plugin registers: what ``dataflex lock`` records.

Listing components needs importing the plugins; they are imported through the checked-import finder (:mod:`.importer`)
from the files just hashed, so the components a lock or ``dataflex verify`` lists come from the bytes it hashed.
"""

from __future__ import annotations

import warnings
from collections.abc import Collection
from dataclasses import replace

from ..discovery import DataFlexPluginManager, PluginLoadWarning
from ..distributions import canonical_name, iter_entry_points
from ..errors import PluginLoadError
from ..plugin_report import PluginFailure
from .compare import OUTSIDE_FIX, describe_outside, entry_point_module, outside_entry_points, outside_rows
from .environment import installed_plugin_set
from .file import LockFileError, PluginSet
from .importer import CHECKED_IMPORTER, install


def load_plugins(dists: Collection[str], plugin_set: PluginSet) -> DataFlexPluginManager:
    """A manager that imported the entry points of ``dists`` (names in ``plugin_set``), and of no other
    distribution, from the files ``plugin_set`` hashed. An entry point outside its distribution's files is kept on
    ``manager.failures``, as a failed import is, for the caller to report as a difference."""
    manager = DataFlexPluginManager()
    records = [plugin_set.plugins[d] for d in dists]
    CHECKED_IMPORTER.add(records)
    install()
    outside = {r.name: outside_entry_points(r) for r in records}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PluginLoadWarning)
        for ep, info in iter_entry_points():
            dist = canonical_name(info.dist) if info.dist is not None else None
            if dist not in outside:
                continue
            if outside[dist].get(ep.name) == entry_point_module(ep.value):
                why = describe_outside(plugin_set.plugins[dist], {ep.name: outside[dist][ep.name]})
                manager.failures.append(PluginFailure(info, PluginLoadError(f"{why}; not imported"), ""))
            else:
                manager.load_entrypoint(ep, info, strict=False)
    return manager


def scan_environment(
    *,
    load: Collection[str] | None = None,
    manager: DataFlexPluginManager | None = None,
    installed: PluginSet | None = None,
) -> PluginSet:
    """The installed plugin set, with components of the distributions whose entry points are imported.

    :param load: canonical names of the distributions whose entry points may be imported to list their components;
        ``None`` imports every installed plugin (what ``dataflex lock`` does). Others get ``components=None``.
    :param manager: a manager that already loaded the plugins (a host's); nothing more is imported, its loaded
        distributions give the components.
    :param installed: the installed set, already hashed (default: hashed now).
    """
    installed = installed if installed is not None else installed_plugin_set()
    if manager is None:
        wanted = None if load is None else {canonical_name(n) for n in load}
        manager = load_plugins([d for d in installed.dist_names if wanted is None or d in wanted], installed)
    loaded = {canonical_name(i.dist) for i in manager.plugin_infos.values() if i.dist}
    errors: dict[str, list[str]] = {}
    for failure in manager.all_failures:
        if failure.plugin.dist:
            text = f"{failure.plugin.name}: {type(failure.error).__name__}: {failure.error}"
            errors.setdefault(canonical_name(failure.plugin.dist), []).append(text)
    # kind -> component names per distribution; a name two plugins clash on is listed under both (each provides it)
    registry = manager.registry()
    components: dict[str, dict[str, list[str]]] = {}
    for spec in [*registry, *(p for clash in registry.clashes.values() for p in clash.providers)]:
        if spec.plugin.dist:
            components.setdefault(canonical_name(spec.plugin.dist), {}).setdefault(spec.kind, []).append(spec.name)
    plugins = {
        name: replace(
            record,
            components={k: tuple(sorted(v)) for k, v in components.get(name, {}).items()}
            if name in loaded and name not in errors
            else None,
            load_error="; ".join(errors[name]) if name in errors else None,
        )
        for name, record in installed.plugins.items()
    }
    return PluginSet(core_version=installed.core_version, plugins=plugins)


def lock_environment() -> PluginSet:
    """The plugin set to write to a lock: every installed plugin, imported to list its components; one with an
    entry point outside its files (checked first, nothing imported), or that fails to import, is refused by name."""
    installed = plugin_set = installed_plugin_set()
    refused = {d.dist: d.detail for d in outside_rows(installed)}
    why, fix = "whose code the lock could not hash (nothing was imported)", f"{OUTSIDE_FIX}, or uninstall it"
    if not refused:
        plugin_set = scan_environment(installed=installed)
        refused = {n: r.load_error for n, r in plugin_set.plugins.items() if r.load_error}
        why, fix = "that fails to import", "fix or uninstall it"
    if refused:
        listed = "\n".join(f"  {n}=={installed.plugins[n].version}: {e}" for n, e in refused.items())
        raise LockFileError(
            f"cannot lock a plugin {why}:\n{listed}\n{fix} (pip uninstall ...), then run `dataflex lock` again"
        )
    return plugin_set
