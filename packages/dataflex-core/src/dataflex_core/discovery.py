"""Entry-point discovery: load every plugin of group ``dataflex``, each in isolation.

One plugin that fails to import must not take the others down: whatever an entry point raises (``SystemExit``
included) becomes a warning naming it, its distribution and version, and what it prints goes to stderr. The
controls follow pytest's: disable autoload, block or allow-list plugins, one environment variable each.
"""

from __future__ import annotations

import contextlib
import importlib.metadata as importlib_metadata
import io
import os
import shlex
import sys
import traceback
import warnings
from collections.abc import Iterable
from typing import Any

import pluggy

from . import hookspecs
from .components import MECHANISM_KIND, kind_of
from .decorators import DECORATED, DecoratedComponent
from .distributions import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP  # re-exported: plugins publish under it
from .distributions import canonical_name, iter_entry_points
from .errors import PluginLoadError
from .plugin_report import PluginFailure, plugin_row
from .registry import LOCAL_PLUGIN, PluginInfo, Registry

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


def _env_list(name: str) -> set[str]:
    return {item.strip() for item in os.environ.get(name, "").split(",") if item.strip()}


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


def _contained(exc: BaseException) -> BaseException:
    """What a plugin raised, as the error its failure reports: an exit attempt is named as one."""
    if isinstance(exc, SystemExit):
        error = PluginLoadError(
            f"the plugin tried to exit the process (SystemExit({exc.code!r}), e.g. a module-level argparse "
            "parse_args() or sys.exit()); a plugin must not read the command line or exit when it is imported"
        )
        error.__cause__ = exc
        return error
    return exc


def _load_quietly(ep: importlib_metadata.EntryPoint, info: PluginInfo) -> Any:
    """``ep.load()``, with what the plugin prints meanwhile sent to stderr under its name."""
    output = io.StringIO()
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            return ep.load()
    finally:
        text = output.getvalue()
        if text:
            prefix = f"[dataflex plugin {info.label}, at import] "
            sys.stderr.write("".join(prefix + line for line in text.splitlines(keepends=True)).rstrip("\n") + "\n")


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

    @hookspecs.hookimpl
    def dataflex_register_components(self, register):
        # One hook for every kind: the registry reads each class's kind from its base.
        for item in self.components:
            register(item.cls, item.name)


class DataFlexPluginManager(pluggy.PluginManager):
    """pluggy's manager plus where each plugin came from and which ones failed."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT_NAME)
        self.add_hookspecs(hookspecs)
        self.plugin_infos: dict[str, PluginInfo] = {}
        #: Plugins that failed to import (``phase="load"``).
        self.failures: list[PluginFailure] = []
        #: Plugins whose registration hooks failed when the registry was last built (``phase="register"``).
        self.register_failures: list[PluginFailure] = []
        self._claimed: set[type] = set()
        #: Top-level packages of every installed dataflex entry point, loaded or not.
        self._plugin_packages: set[str] = set()
        self._registry: Registry | None = None
        self._registry_key: tuple[int, tuple[DecoratedComponent, ...]] | None = None
        #: Bumped on every register/unregister, so the registry is rebuilt after any change.
        self._generation = 0
        #: Canonical names of the only distributions whose entry points may load (a lock's), or None.
        self.only_dists: frozenset[str] | None = None
        #: The lock in force (``$DATAFLEX_PLUGINS_LOCK`` or :func:`use_plugin_lock`), for messages.
        self.lock_path: str | None = None
        #: Installed plugin distributions the lock left out (never imported): canonical name -> version.
        self.unlocked: dict[str, str | None] = {}

    def register(self, plugin: Any, name: str | None = None) -> str | None:
        self._generation += 1
        return super().register(plugin, name)

    def unregister(self, plugin: Any = None, name: str | None = None) -> Any:
        self._generation += 1
        return super().unregister(plugin, name)

    def load_entrypoints(
        self,
        *,
        strict: bool | None = None,
        only_dists: Iterable[str] | None = None,
    ) -> None:
        """Import every allowed entry point of group ``dataflex`` and register it.

        :param strict: re-raise load errors; defaults to ``$DATAFLEX_STRICT_PLUGINS``.
        :param only_dists: entry points of other distributions are never imported (a lock's).
        """
        strict = _env_flag(ENV_STRICT) if strict is None else strict
        if _env_flag(ENV_DISABLE_AUTOLOAD):
            return
        blocked = {canonical_name(n) for n in _env_list(ENV_BLOCK_PLUGINS)}
        allowed = {canonical_name(n) for n in _env_list(ENV_ALLOW_PLUGINS)}
        only = {canonical_name(d) for d in only_dists} if only_dists is not None else None
        if only is not None:
            self.only_dists = frozenset(only)
        for ep, info in iter_entry_points():
            self._plugin_packages.add(ep.module.split(".")[0])
            dist = canonical_name(info.dist) if info.dist else ""
            names = {canonical_name(info.name), dist}
            if names & blocked:
                continue
            if allowed and not names & allowed:
                continue
            if only is not None and dist not in only:
                if dist:
                    self.unlocked[dist] = info.version
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
            obj = _load_quietly(ep, info)
            self._register_loaded(obj, ep.module, info, DECORATED[start:])
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - isolating plugins is the point, SystemExit included
            self._unregister_plugin(self.plugin_key(info))
            failure = PluginFailure(info, _contained(exc), traceback.format_exc())
            self.failures.append(failure)
            if strict:
                raise PluginLoadError(failure.message) from exc
            warnings.warn(failure.message, PluginLoadWarning, stacklevel=2)

    def _register_loaded(self, obj: Any, module_name: str, info: PluginInfo, new: list[DecoratedComponent]) -> None:
        package = module_name.split(".")[0]
        mine = [
            d
            for d in current_decorated()
            if d in new or d.cls.__module__ == package or d.cls.__module__.startswith(package + ".")
        ]
        kind = kind_of(obj)  # an entry point naming a component or mechanism class registers it
        if kind is not None and not any(d.cls is obj for d in mine):
            mine.append(DecoratedComponent(kind, obj.name or info.name, obj))
        key = self.plugin_key(info)
        self.plugin_infos[key] = info
        if any(hasattr(getattr(obj, attr, None), f"{hookspecs.PROJECT_NAME}_impl") for attr in dir(obj)):
            self.register(obj, name=key)
            try:
                self.check_pending()  # a hook name no spec knows: misspelled
            except pluggy.PluginValidationError:
                unknown = sorted(n for n, h in vars(self.hook).items() if not n.startswith("_") and not h.has_spec() and h.get_hookimpls())  # fmt: skip
                known = ", ".join(
                    [hookspecs.COMPONENTS_HOOK, hookspecs.MECHANISMS_HOOK, *hookspecs.REGISTRATION_HOOKS.values()]
                )
                raise PluginLoadError(
                    f"unknown hook {', '.join(map(repr, unknown))} (misspelled?); known hooks: {known}"
                ) from None
        if mine:
            self.register(_DecoratedComponents(mine), name=f"{key}[decorated]")
            self._claimed.update(d.cls for d in mine)

    def _unregister_plugin(self, name: str) -> None:
        for plugin_name in (name, f"{name}[decorated]"):
            plugin = self.get_plugin(plugin_name)
            if plugin is not None:
                self.unregister(plugin)
        self.plugin_infos.pop(name, None)

    def info_for(self, plugin_name: str) -> PluginInfo:
        base = plugin_name.removesuffix("[decorated]")
        return self.plugin_infos.get(base) or PluginInfo(name=base)

    @property
    def all_failures(self) -> list[PluginFailure]:
        """Plugins that failed to import or to register, in that order."""
        self.registry()
        return [*self.failures, *self.register_failures]

    def _registrations(self) -> tuple[dict[str, list[tuple[str, str | None, type]]], list[PluginFailure]]:
        """Each plugin's ``(kind, name, cls)`` registrations; a plugin whose hook fails registers nothing."""
        by_plugin: dict[str, list[tuple[str, str | None, type]]] = {}
        failed: dict[str, PluginFailure] = {}
        hooks = [
            (None, hookspecs.COMPONENTS_HOOK),
            (MECHANISM_KIND, hookspecs.MECHANISMS_HOOK),
            *hookspecs.REGISTRATION_HOOKS.items(),
        ]
        for kind, hook_name in hooks:
            for impl in getattr(self.hook, hook_name).get_hookimpls():
                plugin_name = (self.get_name(impl.plugin) or "").removesuffix("[decorated]")
                if plugin_name in failed:
                    continue
                info = self.info_for(plugin_name)
                staged = by_plugin.setdefault(plugin_name, [])

                def register(cls: type, name: str | None = None, *, _kind=kind, _info=info, _staged=staged) -> None:
                    kind_ = _kind or Registry.checked_kind(cls, _info)
                    _staged.append((kind_, Registry.checked_name(kind_, name, cls, _info), cls))

                try:
                    impl.function(**{arg: register for arg in impl.argnames})
                except KeyboardInterrupt:
                    raise
                except BaseException as exc:  # noqa: BLE001 - one plugin's broken hook must not hide the others
                    cause = _contained(exc)
                    error = PluginLoadError(f"{hook_name} failed: {type(cause).__name__}: {cause}")
                    error.__cause__ = exc
                    failed[plugin_name] = PluginFailure(info, error, traceback.format_exc(), phase="register")
                    by_plugin.pop(plugin_name, None)
        return by_plugin, list(failed.values())

    def registry(self) -> Registry:
        """Components and mechanisms registered by loaded plugins and in-process decorators, rebuilt after any
        change; a clashing name and a failing hook (:attr:`register_failures`) leave the rest usable."""
        key = (self._generation, tuple(DECORATED))  # a record added or forgotten rebuilds it
        if self._registry is not None and self._registry_key == key:
            return self._registry
        registry = Registry()
        registrations, self.register_failures = self._registrations()
        for plugin_name, entries in registrations.items():
            info = self.info_for(plugin_name)
            for kind, name, cls in entries:
                registry.add(kind, name, cls, info)
        # In-process definitions: a later definition of the same name replaces an earlier one, so re-running a notebook
        # cell or a script section does not count as a clash. Classes of an installed plugin that was not loaded
        # (blocked, not allowed, locked out) stay hidden even if something imported their module.
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
        """One record per loaded or failed plugin, as printed by ``dataflex plugins --json``; a name that clashes
        with another plugin's is listed under ``clashes`` with the message saying why it cannot be used."""
        registry = self.registry()
        by_plugin = registry.by_plugin()
        clashes_of: dict[PluginInfo, list[dict[str, str]]] = {}
        for clash in registry.clashes.values():
            for spec in clash.providers:
                clashes_of.setdefault(spec.plugin, []).append(
                    {"kind": clash.kind, "name": clash.name, "error": clash.message}
                )
        failed = {self.plugin_key(f.plugin): f for f in self.register_failures}
        rows = []
        for key, info in sorted(self.plugin_infos.items(), key=lambda kv: (kv[1].dist or "", kv[1].name)):
            row = plugin_row(info, "loaded")
            for spec in by_plugin.get(info, []):
                row["components"].setdefault(spec.kind, []).append(spec.name)
            if key in failed:
                row["status"] = "failed"
                row["error"] = f"{type(failed[key].error).__name__}: {failed[key].error}"
            if info in clashes_of:
                row["status"] = "clash" if row["status"] == "loaded" else row["status"]
                row["clashes"] = clashes_of[info]
            rows.append(row)
        for failure in self.failures:
            row = plugin_row(failure.plugin, "failed")
            row["error"] = f"{type(failure.error).__name__}: {failure.error}"
            rows.append(row)
        return rows

    def problems(self) -> list[str]:
        """One line per plugin that failed and per clashing name: what ``dataflex plugins`` exits non-zero for."""
        registry = self.registry()
        return [f.message for f in self.all_failures] + [clash.message for clash in registry.clashes.values()]

    def locked_out_note(self) -> str | None:
        """With a lock in force and plugins it leaves out, what to say when a component is not found."""
        if self.only_dists is None or not self.unlocked:
            return None
        listed = ", ".join(f"{d}=={v}" if v else d for d, v in sorted(self.unlocked.items()))
        lock = self.lock_path or "the lock"
        return (
            f"installed but not in the plugin lock {lock} (never imported, so it may provide this name): {listed}; "
            f"to use one, review it and add it to the lock with `dataflex lock -o {shlex.quote(lock)}`"
        )
