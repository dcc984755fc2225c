"""Holding a process to a lock, and the process's one plugin manager, held to the lock in force.

A lock is checked once, before any plugin code runs (installed files against the lock, no locked module
already imported from elsewhere); then the locked distributions are imported through :mod:`.importer`. The
plugin manager lives here because it may have to be a locked one; discovery knows nothing of locks.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from dataclasses import replace

from ..discovery import ENV_PLUGINS_LOCK, DataFlexPluginManager
from ..distributions import canonical_name
from ..errors import DataFlexError, PluginLoadError
from ..registry import Registry
from .compare import Difference, compare, format_differences, outside_rows, remedies, sorted_rows
from .environment import installed_plugin_set
from .file import PluginSet, read_lock
from .importer import CHECKED_IMPORTER, CheckedImporter, install, uninstall


class PluginSetMismatch(DataFlexError):
    """The plugin set in use differs from the expected one (a lock or a checkpoint)."""

    def __init__(self, differences: list[Difference], expected_from: str, hint: str = "") -> None:
        self.differences = list(differences)
        self.expected_from = expected_from
        message = f"the dataflex plugin set differs from {expected_from}:\n{format_differences(self.differences)}"
        super().__init__(f"{message}\n{hint}" if hint else message)


class PluginDriftWarning(UserWarning):
    """Version or content drift that ``allow_drift`` accepted."""


def enforce(
    expected: PluginSet,
    actual: PluginSet,
    *,
    allow_drift: bool = False,
    expected_from: str = "the lock",
    hint: str = "",
    lock: str | None = None,
    differences: list[Difference] | None = None,
) -> list[Difference]:
    """Raise :class:`PluginSetMismatch` on any difference ``allow_drift`` does not accept; with ``allow_drift``,
    version and content changes only warn, and are returned so the host can record them.

    :param hint: what the error says after the table; with ``lock`` (its path), then the commands that restore it.
    :param differences: the rows to judge, when the caller has them (default: ``compare(expected, actual)``).
    """
    differences = compare(expected, actual) if differences is None else differences
    refused = [d for d in differences if not (allow_drift and d.is_drift)]
    if refused:
        hint = "; ".join([hint, *remedies(refused, lock)]) if lock is not None else hint
        raise PluginSetMismatch(differences, expected_from, hint)
    if differences:
        warnings.warn(
            f"dataflex plugin set drifted from {expected_from} (accepted by allow_drift):\n"
            f"{format_differences(differences)}",
            PluginDriftWarning,
            stacklevel=2,
        )
    return differences


def enforce_before_import(
    locked: PluginSet,
    installed: PluginSet,
    *,
    allow_drift: bool = False,
    expected_from: str = "the lock",
    lock: str = "LOCK",
) -> list[Difference]:
    """Check the locked distributions as installed (hashed, nothing imported) against ``locked``; installed
    plugins the lock does not list are never imported while it is in force, so they are not compared.

    :param lock: the lock's path, for the restore commands in the error.
    :raises PluginSetMismatch: a locked distribution is missing or differs (version and content only warn with
        ``allow_drift``), or an entry point names a module it does not ship (never accepted).
    """
    mine = restrict_to(installed, locked.dist_names)
    differences = sorted_rows([*compare(locked, mine), *outside_rows(mine)])
    return enforce(locked, mine, allow_drift=allow_drift, expected_from=expected_from,
                   hint="no plugin was imported", lock=lock, differences=differences)  # fmt: skip


def restrict_to(plugin_set: PluginSet, dists: Iterable[str]) -> PluginSet:
    """The same set with only the named distributions (canonical names)."""
    keep = {canonical_name(d) for d in dists}
    return replace(plugin_set, plugins={n: r for n, r in plugin_set.plugins.items() if n in keep})


def locked_manager(
    lock_path: str | os.PathLike[str],
    *,
    allow_drift: bool,
    expected_from: str | None,
) -> DataFlexPluginManager:
    """A manager that imported only the distributions locked in ``lock_path``, from the files it checked."""
    locked = read_lock(lock_path)
    source = expected_from or f"the plugin lock {str(lock_path)!r}"
    installed = installed_plugin_set(only=locked.dist_names)
    enforce_before_import(locked, installed, allow_drift=allow_drift, expected_from=source, lock=str(lock_path))
    # only files the lock lists are ever imported; allow_drift lets their bytes differ, never adds files
    listed = [
        replace(record, files={p: d for p, d in record.files.items() if p in locked.plugins[name].files})
        for name, record in installed.plugins.items()
    ]
    # modules cannot be un-imported: one of theirs already loaded from elsewhere (a copy imported before the lock)
    # ran code nobody checked, so the lock refuses to stand behind it
    before = CheckedImporter()
    before.add(listed)
    found = before.imported_elsewhere()
    if found:
        shown = "; ".join(found[:5]) + (f"; and {len(found) - 5} more" if len(found) > 5 else "")
        raise PluginLoadError(
            f"locked plugin modules were imported before the lock was in force, so the code that ran was never "
            f"checked: {shown}. Apply the lock before anything imports a plugin (set {ENV_PLUGINS_LOCK} in the "
            "job's environment, or build the trainer before importing plugin modules yourself)"
        )
    CHECKED_IMPORTER.add(listed)
    install()
    manager = DataFlexPluginManager()
    manager.lock_path = str(lock_path)
    manager.load_entrypoints(only_dists=locked.dist_names)
    return manager


def use_plugin_lock(
    lock_path: str | os.PathLike[str],
    *,
    allow_drift: bool = False,
    expected_from: str | None = None,
) -> DataFlexPluginManager:
    """Put a plugin lock in force for this process before building components: check the locked files, then
    import only them, each module from the file that was checked. What the lock guards, and what it does not, is
    the production guide's threat model.

    :param allow_drift: accept version and content changes with a
        :class:`~dataflex_core.lock.PluginDriftWarning` instead of refusing.
    :param expected_from: how messages name the lock (e.g. the config key it came from).
    :raises dataflex_core.lock.PluginSetMismatch: a locked distribution is missing or changed, with one row per
        difference and the commands that restore the locked set.
    :raises PluginLoadError: plugins outside the lock, or locked plugin modules from other files, were already
        imported in this process (modules cannot be un-imported).
    """
    global _MANAGER
    allowed = {canonical_name(d) for d in read_lock(lock_path).dist_names}
    if _MANAGER is not None:
        loaded = {i.dist for i in _MANAGER.plugin_infos.values() if i.dist}
        loaded |= {f.plugin.dist for f in _MANAGER.failures if f.plugin.dist}
        outside = sorted(d for d in loaded if canonical_name(d) not in allowed)
        if outside:
            raise PluginLoadError(
                f"plugins not in the lock {str(lock_path)!r} were already imported in this process: "
                f"{', '.join(outside)}; apply the lock before anything loads plugins, e.g. set "
                f"{ENV_PLUGINS_LOCK}={lock_path} in the environment"
            )
    _MANAGER = locked_manager(lock_path, allow_drift=allow_drift, expected_from=expected_from)
    return _MANAGER


_MANAGER: DataFlexPluginManager | None = None


def get_plugin_manager() -> DataFlexPluginManager:
    """The process-wide plugin manager, loaded on the first call (held to ``$DATAFLEX_PLUGINS_LOCK`` if set)."""
    global _MANAGER
    lock_path = os.environ.get(ENV_PLUGINS_LOCK, "").strip()
    if _MANAGER is None and lock_path:
        _MANAGER = locked_manager(lock_path, allow_drift=False, expected_from=f"${ENV_PLUGINS_LOCK}={lock_path}")
    elif _MANAGER is None:
        _MANAGER = DataFlexPluginManager()
        _MANAGER.load_entrypoints()
    return _MANAGER


def reset_plugin_manager() -> None:
    """Forget the loaded plugins (and any checked-import finder), so the next :func:`get_plugin_manager` reloads."""
    global _MANAGER
    _MANAGER = None
    uninstall()


def get_registry() -> Registry:
    """Shortcut for ``get_plugin_manager().registry()``."""
    return get_plugin_manager().registry()
