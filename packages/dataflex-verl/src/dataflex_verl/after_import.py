"""Run a function on a module the moment it finishes importing (at once, when it already has).

verl imports its plugins from inside ``import verl``, in the driver and in every Ray actor. Importing the verl
module a plugin patches right there would add seconds to every worker's start and run half-way through verl's own
``__init__``; a patch to a module that only some processes import waits for that import instead. One finder
serves every waiting action (dataflex-verl's own, and the CPU harness's in dataflex-lab); it stands first on
``sys.meta_path`` only while something waits.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

#: module name -> what to run on it once it has been imported.
_waiting: dict[str, list[Callable[[ModuleType], None]]] = {}


def when_imported(name: str, action: Callable[[ModuleType], None]) -> None:
    """Call ``action(module)`` once the module ``name`` has run: now if it has, else right after its import."""
    module = sys.modules.get(name)
    if module is not None:
        action(module)
        return
    _waiting.setdefault(name, []).append(action)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def waiting() -> list[str]:
    """The modules an action still waits for, in the order they were first asked for."""
    return list(_waiting)


class _ThenLoader(importlib.abc.Loader):
    """A module's own loader, followed by the actions waiting for that module."""

    def __init__(self, loader: importlib.abc.Loader, name: str) -> None:
        self._loader = loader
        self._name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        actions = _waiting.pop(self._name, [])
        if not _waiting:
            while _FINDER in sys.meta_path:
                sys.meta_path.remove(_FINDER)
        for action in actions:
            action(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader the other finders return for a module something waits for."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _waiting:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _ThenLoader(spec.loader, fullname)
                return spec
        return None


_FINDER = _Finder()
