"""The plugin manager a lock imports plugins with: the import system is checked after every entry-point import.

A locked plugin runs code when its entry point is imported. Were that code to
put an import hook in front of the lock's finder, the next plugin's modules
would come from wherever the hook says; were it to serve a locked module
itself, or replace ``builtins.__import__``, code nobody hashed would register
components. So after each import, loaded or failed, the lock's finder goes back
in front of ``sys.meta_path`` and every module of a locked distribution in
``sys.modules`` must come from its checked file (the spec the finder returned,
by identity), with ``builtins.__import__`` still Python's own.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ..discovery import DataFlexPluginManager
from ..errors import PluginLoadError
from ..plugin_report import PluginFailure
from ..registry import PluginInfo
from .importer import CHECKED_IMPORTER, import_replaced, install, shown, unchecked_modules


class GuardedPluginManager(DataFlexPluginManager):
    """A manager for the locked distributions ``locked``: a plugin whose import breaks the lock is refused.

    :param refuse: raise :class:`PluginLoadError` (a lock in force: the run stops); otherwise the plugin is
        recorded as failed (``dataflex lock`` and ``verify`` report it).
    """

    def __init__(self, locked: Collection[str], *, refuse: bool = True) -> None:
        super().__init__()
        self.guarded = frozenset(locked)
        self.refuse = refuse

    def load_entrypoint(self, ep: Any, info: PluginInfo, *, strict: bool) -> None:
        before = set(unchecked_modules(CHECKED_IMPORTER, self.guarded))
        replaced_before = import_replaced()
        try:
            super().load_entrypoint(ep, info, strict=strict)
        finally:
            install()
        problem = _problem(info, before, replaced_before, self.guarded)
        if problem is None:
            return
        error = PluginLoadError(problem)
        if self.refuse:
            raise error
        self._unregister_plugin(self.plugin_key(info))
        self.failures.append(PluginFailure(info, error, ""))


def _problem(info: PluginInfo, before: set[str], replaced_before: str | None, dists: Collection[str]) -> str | None:
    """What importing ``info`` did to the import system that the lock refuses, or ``None``."""
    served = [m for m in unchecked_modules(CHECKED_IMPORTER, dists) if m not in before]
    if served:
        return (
            f"importing {info.label} put locked modules into sys.modules that did not come from their checked files: "
            f"{shown(served)} (an import hook or code of that plugin served them); it is refused: remove it from the "
            "lock and the environment"
        )
    replaced = import_replaced()
    if replaced is not None and replaced != replaced_before:
        return (
            f"importing {info.label} replaced builtins.__import__ (now {replaced}), so an import statement of a "
            "locked plugin could run code the lock never checked; it is refused: remove it from the lock and the "
            "environment"
        )
    return None
