"""Holding a process to a lock: refuse any difference, or accept declared drift with a warning.

A lock in force is checked twice where it can be: before any plugin is
imported, the locked distributions' installed files against the lock
(:func:`enforce_before_import`), so a modified plugin never runs; after
loading, a host may also compare the components they registered
(:func:`enforce`). Every refusal names each difference and the commands
that restore the locked set.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import replace

from .distributions import canonical_name
from .errors import DataFlexError
from .lock_compare import Difference, compare, format_differences, remedies
from .lock_file import PluginSet


class PluginSetMismatch(DataFlexError):
    """The plugin set in use differs from the expected one (a lock or a checkpoint)."""

    def __init__(self, differences: list[Difference], expected_from: str, hint: str = "") -> None:
        self.differences = list(differences)
        self.expected_from = expected_from
        message = f"the dataflex plugin set differs from {expected_from}:\n{format_differences(self.differences)}"
        if hint:
            message += f"\n{hint}"
        super().__init__(message)


class PluginDriftWarning(UserWarning):
    """Version or content drift that ``allow_drift`` accepted."""


def enforce(
    expected: PluginSet,
    actual: PluginSet,
    *,
    allow_drift: bool = False,
    expected_from: str = "the lock",
    hint: str = "",
) -> list[Difference]:
    """Raise :class:`PluginSetMismatch` on any difference ``allow_drift`` does not accept.

    With ``allow_drift``, version and content changes only warn
    (:class:`PluginDriftWarning`); the accepted differences are returned so the
    host can record them.
    """
    differences = compare(expected, actual)
    refused = [d for d in differences if not (allow_drift and d.is_drift)]
    if refused:
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
    """Check the locked distributions as installed (``installed``: hashed, nothing imported) against ``locked``.

    Installed plugins the lock does not list are not part of this check: they are
    never imported while the lock is in force.

    :param lock: the lock's path, for the restore commands in the error.
    :raises PluginSetMismatch: a locked distribution is missing, or its version, entry
        points or files differ (version and content only warn with ``allow_drift``).
    """
    mine = restrict_to(installed, locked.dist_names)
    differences = compare(locked, mine)
    refused = [d for d in differences if not (allow_drift and d.is_drift)]
    hint = "no plugin was imported. " + "; ".join(remedies(refused, lock)) if refused else ""
    return enforce(locked, mine, allow_drift=allow_drift, expected_from=expected_from, hint=hint)


def restrict_to(plugin_set: PluginSet, dists: Iterable[str]) -> PluginSet:
    """The same set with only the named distributions (canonical names)."""
    keep = {canonical_name(d) for d in dists}
    return replace(plugin_set, plugins={n: r for n, r in plugin_set.plugins.items() if n in keep})
