"""The table of registered components and plugin mechanisms: kind -> name -> class and where it came from.

Every declared kind has a table (:data:`~dataflex_core.components.BASE_CLASSES`): the six component kinds,
``mechanism``, and a kind a plugin's base class declares, so a new kind needs no change here.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from dataclasses import dataclass, field

from .components import BASE_CLASSES, KINDS, RESERVED_NAMES, base_label, declared_kinds, is_component_name, kind_of
from .errors import DeclarationError, DuplicateComponentError


@dataclass(frozen=True)
class PluginInfo:
    """Where a plugin comes from: its entry point and distribution."""

    name: str
    value: str = ""
    dist: str | None = None
    version: str | None = None

    @property
    def label(self) -> str:
        """``name (dist==version)`` as used in messages."""
        if self.dist:
            return f"{self.name} ({self.dist}=={self.version})"
        return self.name


#: Attribution of components defined outside any installed plugin.
LOCAL_PLUGIN = PluginInfo(name="__local__", value="", dist=None, version=None)


@dataclass(frozen=True)
class ComponentSpec:
    kind: str
    name: str
    cls: type
    plugin: PluginInfo

    @property
    def dist(self) -> str | None:
        return self.plugin.dist

    @property
    def version(self) -> str | None:
        return self.plugin.version

    @property
    def label(self) -> str:
        """``name (dist==version)``, or just the name for local components."""
        return PluginInfo(self.name, dist=self.plugin.dist, version=self.plugin.version).label


@dataclass(frozen=True)
class NameClash:
    """One component name registered by two plugins: unusable until one of them goes."""

    kind: str
    name: str
    providers: tuple[ComponentSpec, ...]

    @property
    def dists(self) -> list[str]:
        return [p.plugin.label for p in self.providers]

    @property
    def message(self) -> str:
        who = " and by ".join(
            f"{p.plugin.dist}=={p.plugin.version} ({p.cls.__module__}.{p.cls.__qualname__})"
            if p.plugin.dist
            else f"{p.plugin.label} ({p.cls.__module__}.{p.cls.__qualname__})"
            for p in self.providers
        )
        blockable = [p.plugin.dist for p in self.providers if p.plugin.dist]
        block = f"DATAFLEX_BLOCK_PLUGINS={blockable[-1]}" if blockable else "DATAFLEX_BLOCK_PLUGINS"
        return (
            f"{self.kind} name {self.name!r} is registered twice: by {who}; the name cannot be used until one "
            f"of them is uninstalled or blocked (e.g. {block})"
        )


@dataclass
class Registry:
    """Registered components by kind, built by the plugin manager. A name two plugins register is a
    :class:`NameClash`, left out of the table; every other component stays usable."""

    components: dict[str, dict[str, ComponentSpec]] = field(default_factory=lambda: {kind: {} for kind in KINDS})
    clashes: dict[tuple[str, str], NameClash] = field(default_factory=dict)

    @staticmethod
    def checked_kind(cls: type, plugin: PluginInfo) -> str:
        """The kind ``cls`` is, from its base class; :class:`DeclarationError` if it has none."""
        kind = kind_of(cls)
        if kind is None:
            bases = ", ".join(base_label(base) for base in BASE_CLASSES.values())
            raise DeclarationError(
                f"plugin {plugin.label} registers {cls!r}, which subclasses no component base; subclass one of {bases}"
            )
        return kind

    @staticmethod
    def checked_name(kind: str, name: str | None, cls: type, plugin: PluginInfo) -> str:
        """The name ``cls`` registers under; :class:`DeclarationError` if it is not a ``kind`` with a name, the name
        is no lower-case identifier, or it is one dataflex-core ships for that kind (a built-in mechanism)."""
        base = BASE_CLASSES[kind]
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise DeclarationError(
                f"plugin {plugin.label} registers {cls!r} as a {kind}, but it does not subclass {base_label(base)}"
            )
        name = name or getattr(cls, "name", None)
        if not name or not isinstance(name, str):
            raise DeclarationError(
                f"plugin {plugin.label} registers {cls.__qualname__} without a name; "
                "pass register(cls, name='...') or set cls.name"
            )
        if not is_component_name(name):
            raise DeclarationError(
                f"plugin {plugin.label} registers {kind} {name!r} ({cls.__module__}.{cls.__qualname__}): a name is a "
                "lower-case identifier ([a-z][a-z0-9_]*), e.g. 'length_penalty'"
            )
        if name in RESERVED_NAMES.get(kind, ()):
            raise DeclarationError(
                f"plugin {plugin.label} registers {kind} {name!r} ({cls.__module__}.{cls.__qualname__}), but "
                f"dataflex-core ships a {kind} of that name; give it another name"
            )
        return name

    def add(self, kind: str, name: str | None, cls: type, plugin: PluginInfo) -> None:
        """Register ``cls``; a second class under a taken name turns the name into a :class:`NameClash`."""
        name = self.checked_name(kind, name, cls, plugin)
        spec = ComponentSpec(kind, name, cls, plugin)
        clash = self.clashes.get((kind, name))
        if clash is not None:
            if all(p.cls is not cls for p in clash.providers):
                self.clashes[(kind, name)] = NameClash(kind, name, (*clash.providers, spec))
            return
        table = self.components.setdefault(kind, {})
        existing = table.get(name)
        if existing is None:
            table[name] = spec
        elif existing.cls is not cls:  # the same class reaching us twice (decorator + scan) is no clash
            del table[name]
            self.clashes[(kind, name)] = NameClash(kind, name, (existing, spec))

    def get(self, kind: str, name: str) -> ComponentSpec | None:
        return self.components.get(kind, {}).get(name)

    def clash(self, kind: str, name: str) -> NameClash | None:
        """Why ``name`` is unusable, when two plugins register it."""
        return self.clashes.get((kind, name))

    def require(self, kind: str, name: str) -> ComponentSpec | None:
        """Like :meth:`get`, but a clashed name raises :class:`DuplicateComponentError` naming both plugins."""
        clash = self.clash(kind, name)
        if clash is not None:
            raise DuplicateComponentError(clash.message)
        return self.get(kind, name)

    def names(self, kind: str) -> list[str]:
        return sorted(self.components.get(kind, {}))

    def kinds(self) -> list[str]:
        """The kinds with a table (the shipped component kinds always), in reading order."""
        return declared_kinds([*self.components, *(kind for kind, _ in self.clashes)])

    def close_match(self, kind: str, name: str) -> str | None:
        matches = difflib.get_close_matches(name, self.names(kind), n=1, cutoff=0.6)
        return matches[0] if matches else None

    def find_kind(self, name: str) -> list[str]:
        """Kinds under which ``name`` is registered (clashed names included)."""
        return [kind for kind in self.kinds() if name in self.components.get(kind, {}) or (kind, name) in self.clashes]

    def __iter__(self) -> Iterator[ComponentSpec]:
        for kind in self.kinds():
            table = self.components.get(kind, {})
            for name in sorted(table):
                yield table[name]

    def by_plugin(self) -> dict[PluginInfo, list[ComponentSpec]]:
        out: dict[PluginInfo, list[ComponentSpec]] = {}
        for spec in self:
            out.setdefault(spec.plugin, []).append(spec)
        return out
