"""Entry-point discovery: load every plugin of group ``dataflex``, each in isolation.

One plugin that fails to import must not take the others down, so each entry
point is loaded on its own and a failure becomes a warning naming the entry
point, its distribution and version (unless strict loading is asked for).
The controls follow pytest's: disable autoload, block named plugins, or
allow-list them, each through one environment variable.
"""

from __future__ import annotations

import importlib.metadata as importlib_metadata
import os
import re
import sys
import traceback
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pluggy

from . import hookspecs
from .components import Component
from .decorators import DECORATED, DecoratedComponent
from .errors import DeclarationError, DuplicateComponentError, PluginLoadError
from .registry import LOCAL_PLUGIN, PluginInfo, Registry

#: Entry-point group plugins publish themselves under.
ENTRY_POINT_GROUP = "dataflex"
#: Set to ``1`` to load no entry points at all (only components defined in-process).
ENV_DISABLE_AUTOLOAD = "DATAFLEX_DISABLE_PLUGIN_AUTOLOAD"
#: Comma-separated entry-point or distribution names never to import.
ENV_BLOCK_PLUGINS = "DATAFLEX_BLOCK_PLUGINS"
#: Comma-separated entry-point or distribution names; when set, only these are imported.
ENV_ALLOW_PLUGINS = "DATAFLEX_PLUGINS"
#: Set to ``1`` to re-raise a plugin's load error instead of skipping the plugin.
ENV_STRICT = "DATAFLEX_STRICT_PLUGINS"
#: Path of a plugin lock file (``dataflex lock``); when set, only entry points of the
#: distributions it lists are imported, so an unlisted installed plugin never runs code.
ENV_PLUGINS_LOCK = "DATAFLEX_PLUGINS_LOCK"

_TRUE = {"1", "true", "yes", "on"}


class PluginLoadWarning(UserWarning):
    """A plugin was skipped because it failed to load."""


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that was skipped, with the error that caused it."""

    plugin: PluginInfo
    error: BaseException
    traceback: str

    @property
    def message(self) -> str:
        return f"skipping plugin {self.plugin.label}: {type(self.error).__name__}: {self.error}"


def _env_list(name: str) -> set[str]:
    return {item.strip() for item in os.environ.get(name, "").split(",") if item.strip()}


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


def _normalise_dist(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def iter_entry_points() -> list[tuple[importlib_metadata.EntryPoint, PluginInfo]]:
    """Installed entry points of group ``dataflex`` with their distribution, deduplicated."""
    seen: set[tuple[str, str, str | None]] = set()
    out = []
    for ep in importlib_metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        dist_name = dist.metadata["Name"] if dist is not None else None
        key = (ep.name, ep.value, dist_name)
        if key in seen:
            continue
        seen.add(key)
        info = PluginInfo(
            name=ep.name,
            value=ep.value,
            dist=dist_name,
            version=dist.version if dist is not None else None,
        )
        out.append((ep, info))
    out.sort(key=lambda pair: (pair[1].dist or "", pair[1].name))
    return out


def _has_hookimpls(obj: Any) -> bool:
    return any(name.startswith("dataflex_") and hasattr(getattr(obj, name, None), "dataflex_impl") for name in dir(obj))


def _unknown_hooks(obj: Any) -> list[str]:
    known = set(hookspecs.REGISTRATION_HOOKS.values())
    return sorted(name for name in dir(obj) if hasattr(getattr(obj, name, None), "dataflex_impl") and name not in known)


def _is_current(item: DecoratedComponent) -> bool:
    """False for a class whose module was re-imported or unloaded since it was defined."""
    if item.module is None:
        return True  # exec'd code: no module object that a re-import could replace
    if sys.modules.get(item.cls.__module__) is not item.module:
        return False
    if "<locals>" in item.cls.__qualname__:
        return True
    obj: Any = item.module
    for part in item.cls.__qualname__.split("."):
        obj = getattr(obj, part, None)
    return obj is item.cls


def current_decorated() -> list[DecoratedComponent]:
    """Decorated classes, without those superseded by a re-import of their module."""
    return [d for d in DECORATED if _is_current(d)]


class _DecoratedComponents:
    """Hook implementations for classes registered with the ``register_*`` decorators."""

    def __init__(self, components: list[DecoratedComponent]) -> None:
        self.components = list(components)

    def _register(self, kind: str, register: Callable[..., Any]) -> None:
        for item in self.components:
            if item.kind == kind:
                register(item.cls, item.name)

    @hookspecs.hookimpl
    def dataflex_register_scorers(self, register):
        self._register("scorer", register)

    @hookspecs.hookimpl
    def dataflex_register_reweighters(self, register):
        self._register("reweighter", register)

    @hookspecs.hookimpl
    def dataflex_register_selectors(self, register):
        self._register("selector", register)

    @hookspecs.hookimpl
    def dataflex_register_mixers(self, register):
        self._register("mixer", register)


class DataFlexPluginManager(pluggy.PluginManager):
    """pluggy's manager plus where each plugin came from and which ones failed."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT_NAME)
        self.add_hookspecs(hookspecs)
        self.plugin_infos: dict[str, PluginInfo] = {}
        self.failures: list[PluginFailure] = []
        self._claimed: set[type] = set()
        #: Top-level packages of every installed dataflex entry point, loaded or not.
        self._plugin_packages: set[str] = set()
        self._registry: Registry | None = None
        self._registry_key: tuple[int, int] | None = None
        #: Canonical names of the only distributions whose entry points may load (a lock's), or None.
        self.only_dists: frozenset[str] | None = None

    # -- loading ---------------------------------------------------------
    def load_entrypoints(
        self,
        *,
        strict: bool | None = None,
        only_dists: Iterable[str] | None = None,
    ) -> None:
        """Import every allowed entry point of group ``dataflex`` and register it.

        :param strict: re-raise load errors; defaults to ``$DATAFLEX_STRICT_PLUGINS``.
        :param only_dists: when given, entry points of other distributions are
            never imported (a lock file's enforcement uses this).
        """
        strict = _env_flag(ENV_STRICT) if strict is None else strict
        if _env_flag(ENV_DISABLE_AUTOLOAD):
            return
        blocked = {_normalise_dist(n) for n in _env_list(ENV_BLOCK_PLUGINS)}
        allowed = {_normalise_dist(n) for n in _env_list(ENV_ALLOW_PLUGINS)}
        only = {_normalise_dist(d) for d in only_dists} if only_dists is not None else None
        if only is not None:
            self.only_dists = frozenset(only)
        for ep, info in iter_entry_points():
            self._plugin_packages.add(ep.module.split(".")[0])
            names = {_normalise_dist(info.name), _normalise_dist(info.dist or "")}
            if names & blocked:
                continue
            if allowed and not names & allowed:
                continue
            if only is not None and _normalise_dist(info.dist or "") not in only:
                continue
            self.load_entrypoint(ep, info, strict=strict)

    @staticmethod
    def plugin_key(info: PluginInfo) -> str:
        """pluggy name of a plugin: unique even when two distributions reuse an entry-point name."""
        return f"{info.dist}:{info.name}" if info.dist else info.name

    def load_entrypoint(self, ep: importlib_metadata.EntryPoint, info: PluginInfo, *, strict: bool) -> None:
        if self.plugin_key(info) in self.plugin_infos:
            return
        start = len(DECORATED)
        try:
            obj = ep.load()
            self._register_loaded(obj, ep.module, info, DECORATED[start:])
        except Exception as exc:  # noqa: BLE001 - isolating plugins is the point
            self._unregister_plugin(self.plugin_key(info))
            failure = PluginFailure(info, exc, traceback.format_exc())
            self.failures.append(failure)
            if strict:
                raise PluginLoadError(failure.message) from exc
            warnings.warn(failure.message, PluginLoadWarning, stacklevel=2)

    def _register_loaded(self, obj: Any, module_name: str, info: PluginInfo, new: list[DecoratedComponent]) -> None:
        unknown = _unknown_hooks(obj)
        if unknown:
            known = ", ".join(hookspecs.REGISTRATION_HOOKS.values())
            raise PluginLoadError(f"unknown hook(s) {unknown} (misspelled?); known hooks: {known}")
        package = module_name.split(".")[0]
        mine = [
            d
            for d in current_decorated()
            if d in new or d.cls.__module__ == package or d.cls.__module__.startswith(package + ".")
        ]
        if isinstance(obj, type) and issubclass(obj, Component) and not any(d.cls is obj for d in mine):
            kind = obj.kind
            mine.append(DecoratedComponent(kind, obj.name or info.name, obj))
        key = self.plugin_key(info)
        self.plugin_infos[key] = info
        if _has_hookimpls(obj):
            self.register(obj, name=key)
        if mine:
            self.register(_DecoratedComponents(mine), name=f"{key}[decorated]")
            self._claimed.update(d.cls for d in mine)
        self._registry = None

    def _unregister_plugin(self, name: str) -> None:
        for plugin_name in (name, f"{name}[decorated]"):
            plugin = self.get_plugin(plugin_name)
            if plugin is not None:
                self.unregister(plugin)
        self.plugin_infos.pop(name, None)

    def info_for(self, plugin_name: str) -> PluginInfo:
        base = plugin_name.removesuffix("[decorated]")
        return self.plugin_infos.get(base) or PluginInfo(name=base)

    # -- the registry ----------------------------------------------------
    def registry(self) -> Registry:
        """Components registered by loaded plugins and by in-process decorators.

        Rebuilt when a plugin was registered or a class decorated since the last call.
        """
        key = (len(DECORATED), len(self.get_plugins()))
        if self._registry is not None and self._registry_key == key:
            return self._registry
        registry = Registry()
        for kind, hook_name in hookspecs.REGISTRATION_HOOKS.items():
            for impl in getattr(self.hook, hook_name).get_hookimpls():
                info = self.info_for(self.get_name(impl.plugin) or "")

                def register(cls: type, name: str | None = None, *, _kind=kind, _info=info) -> None:
                    registry.add(_kind, name, cls, _info)

                try:
                    impl.function(**{arg: register for arg in impl.argnames})
                except (DuplicateComponentError, DeclarationError):
                    raise
                except Exception as exc:
                    raise PluginLoadError(
                        f"plugin {info.label} failed in {hook_name}: {type(exc).__name__}: {exc}"
                    ) from exc
        # In-process definitions: a later definition of the same name replaces an earlier
        # one, so re-running a notebook cell or a script section does not count as a clash.
        # Classes of an installed plugin that was not loaded (blocked, not allowed, locked out)
        # stay hidden even if something imported their module.
        local = {
            (d.kind, d.name): d
            for d in current_decorated()
            if d.cls not in self._claimed and d.cls.__module__.split(".")[0] not in self._plugin_packages
        }
        for item in local.values():
            registry.add(item.kind, item.name, item.cls, LOCAL_PLUGIN)
        self._registry, self._registry_key = registry, key
        return registry

    def describe_plugins(self) -> list[dict[str, Any]]:
        """One record per loaded or failed plugin, as printed by ``dataflex plugins --json``."""
        by_plugin = self.registry().by_plugin()
        rows = []
        for info in sorted(self.plugin_infos.values(), key=lambda i: (i.dist or "", i.name)):
            components: dict[str, list[str]] = {}
            for spec in by_plugin.get(info, []):
                components.setdefault(spec.kind, []).append(spec.name)
            rows.append(
                {
                    "entry_point": info.name,
                    "value": info.value,
                    "distribution": info.dist,
                    "version": info.version,
                    "status": "loaded",
                    "components": components,
                }
            )
        for failure in self.failures:
            info = failure.plugin
            rows.append(
                {
                    "entry_point": info.name,
                    "value": info.value,
                    "distribution": info.dist,
                    "version": info.version,
                    "status": "failed",
                    "error": f"{type(failure.error).__name__}: {failure.error}",
                    "components": {},
                }
            )
        return rows


_MANAGER: DataFlexPluginManager | None = None


def _locked_dists(lock_path: str | os.PathLike[str]) -> list[str]:
    from .lock import read_lock  # lock builds on this module

    return read_lock(lock_path).dist_names


def get_plugin_manager() -> DataFlexPluginManager:
    """The process-wide plugin manager; entry points are loaded on the first call only.

    With ``$DATAFLEX_PLUGINS_LOCK`` set, only the locked distributions' entry points are imported.
    """
    global _MANAGER
    if _MANAGER is None:
        manager = DataFlexPluginManager()
        lock_path = os.environ.get(ENV_PLUGINS_LOCK, "").strip()
        manager.load_entrypoints(only_dists=_locked_dists(lock_path) if lock_path else None)
        _MANAGER = manager
    return _MANAGER


def use_plugin_lock(lock_path: str | os.PathLike[str]) -> DataFlexPluginManager:
    """Make the process-wide manager load only the distributions locked in ``lock_path``.

    For hosts that read the lock path from their own config. Modules cannot be
    un-imported, so if plugins outside the lock were already loaded in this
    process the call fails rather than pretending they are gone.
    """
    global _MANAGER
    allowed = {_normalise_dist(d) for d in _locked_dists(lock_path)}
    if _MANAGER is not None:
        loaded = {i.dist for i in _MANAGER.plugin_infos.values() if i.dist}
        loaded |= {f.plugin.dist for f in _MANAGER.failures if f.plugin.dist}
        outside = sorted(d for d in loaded if _normalise_dist(d) not in allowed)
        if outside:
            raise PluginLoadError(
                f"plugins not in the lock {str(lock_path)!r} were already imported in this process: "
                f"{', '.join(outside)}; apply the lock before anything loads plugins, e.g. set "
                f"{ENV_PLUGINS_LOCK}={lock_path} in the environment"
            )
    manager = DataFlexPluginManager()
    manager.load_entrypoints(only_dists=allowed)
    _MANAGER = manager
    return manager


def reset_plugin_manager() -> None:
    """Forget the loaded plugins, so the next :func:`get_plugin_manager` reloads them."""
    global _MANAGER
    _MANAGER = None


def get_registry() -> Registry:
    """Shortcut for ``get_plugin_manager().registry()``."""
    return get_plugin_manager().registry()
