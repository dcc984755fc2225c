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
from .environment import installed_plugin_set
from .file import LockFileError, PluginSet
from .importer import CHECKED_IMPORTER, install
from .outside import OUTSIDE_FIX, describe, entry_point_module, outside_entry_points


def load_plugins(
    dists: Collection[str],
    manager: DataFlexPluginManager | None = None,
    *,
    plugin_set: PluginSet | None = None,
) -> DataFlexPluginManager:
    """Import the entry points of ``dists`` (canonical names), and of no other distribution, from the files
    ``plugin_set`` hashed. Load failures (an entry point outside its distribution's files included) are kept on
    ``manager.failures`` for the caller to report as differences."""
    wanted = {canonical_name(d) for d in dists}
    manager = manager if manager is not None else DataFlexPluginManager()
    plugin_set = plugin_set if plugin_set is not None else installed_plugin_set(only=wanted)
    CHECKED_IMPORTER.add([r for n, r in plugin_set.plugins.items() if n in wanted])
    install()
    outside = {n: outside_entry_points(r) for n, r in plugin_set.plugins.items() if n in wanted}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PluginLoadWarning)
        for ep, info in iter_entry_points():
            dist = canonical_name(info.dist) if info.dist is not None else None
            if dist not in wanted:
                continue
            if dist not in plugin_set.plugins or outside[dist].get(ep.name) == entry_point_module(ep.value):
                record = plugin_set.plugins.get(dist)
                why = describe(record, {ep.name: outside[dist][ep.name]}) if record else f"{dist} was not hashed"
                manager.failures.append(PluginFailure(info, PluginLoadError(f"{why}; not imported"), ""))
                continue
            manager.load_entrypoint(ep, info, strict=False)
    return manager


def components_by_dist(manager: DataFlexPluginManager) -> dict[str, dict[str, tuple[str, ...]]]:
    """kind -> sorted component names, per canonical distribution name, of the loaded plugins (a name two
    plugins clash on is listed under both: each still provides it)."""
    registry = manager.registry()
    out: dict[str, dict[str, list[str]]] = {}
    specs = [*registry, *(p for clash in registry.clashes.values() for p in clash.providers)]
    for spec in specs:
        if spec.plugin.dist:
            out.setdefault(canonical_name(spec.plugin.dist), {}).setdefault(spec.kind, []).append(spec.name)
    return {dist: {kind: tuple(sorted(names)) for kind, names in kinds.items()} for dist, kinds in out.items()}


def _load_errors(manager: DataFlexPluginManager) -> dict[str, str]:
    errors: dict[str, str] = {}
    for failure in manager.all_failures:
        if failure.plugin.dist:
            key = canonical_name(failure.plugin.dist)
            text = f"{failure.plugin.name}: {type(failure.error).__name__}: {failure.error}"
            errors[key] = f"{errors[key]}; {text}" if key in errors else text
    return errors


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
        names = installed.dist_names if load is None else [d for d in installed.dist_names if d in {canonical_name(n) for n in load}]  # fmt: skip
        manager = load_plugins(names, plugin_set=installed)
    loaded = {canonical_name(i.dist) for i in manager.plugin_infos.values() if i.dist}
    errors = _load_errors(manager)
    components = components_by_dist(manager)
    plugins = {
        name: replace(
            record,
            components=components.get(name, {}) if name in loaded and name not in errors else None,
            load_error=errors.get(name),
        )
        for name, record in installed.plugins.items()
    }
    return PluginSet(core_version=installed.core_version, plugins=plugins)


def lock_environment() -> PluginSet:
    """The plugin set to write to a lock: every installed plugin, imported to list its components; one that fails
    to import, or has an entry point outside its files (checked first), is refused by name."""
    installed = installed_plugin_set()
    outside = {n: outside_entry_points(r) for n, r in installed.plugins.items()}
    outside = {n: found for n, found in outside.items() if found}
    if outside:
        listed = "\n".join(
            f"  {n}=={installed.plugins[n].version}: {describe(installed.plugins[n], found)}"
            for n, found in outside.items()
        )
        raise LockFileError(
            "cannot lock a plugin whose code the lock could not hash (nothing was imported):\n"
            f"{listed}\n{OUTSIDE_FIX}, or uninstall it (pip uninstall ...), then run `dataflex lock` again"
        )
    plugin_set = scan_environment(installed=installed)
    broken = {n: r.load_error for n, r in plugin_set.plugins.items() if r.load_error}
    if broken:
        listed = "\n".join(f"  {n}=={plugin_set.plugins[n].version}: {e}" for n, e in broken.items())
        raise LockFileError(
            "cannot lock a plugin that fails to import:\n"
            f"{listed}\nfix or uninstall it (pip uninstall ...), then run `dataflex lock` again"
        )
    return plugin_set
