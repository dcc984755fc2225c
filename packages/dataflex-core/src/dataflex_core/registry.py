"""The table of registered components: kind -> name -> class and where it came from."""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from dataclasses import dataclass, field

from .components import BASE_CLASSES, KINDS
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
        if self.plugin.dist:
            return f"{self.name} ({self.plugin.dist}=={self.plugin.version})"
        return self.name


@dataclass
class Registry:
    """Registered components by kind; built by the plugin manager."""

    components: dict[str, dict[str, ComponentSpec]] = field(default_factory=lambda: {kind: {} for kind in KINDS})

    def add(self, kind: str, name: str | None, cls: type, plugin: PluginInfo) -> None:
        base = BASE_CLASSES[kind]
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise DeclarationError(
                f"plugin {plugin.label} registers {cls!r} as a {kind}, but it does not "
                f"subclass dataflex_core.{base.__name__}"
            )
        name = name or getattr(cls, "name", None)
        if not name:
            raise DeclarationError(
                f"plugin {plugin.label} registers {cls.__qualname__} without a name; "
                "pass register(cls, name='...') or set cls.name"
            )
        table = self.components[kind]
        existing = table.get(name)
        if existing is not None:
            if existing.cls is cls:
                return  # the same class reached us twice (decorator + scan): keep the first
            raise DuplicateComponentError(
                f"{kind} name {name!r} is registered twice: by {existing.plugin.label} "
                f"({existing.cls.__module__}.{existing.cls.__qualname__}) and by {plugin.label} "
                f"({cls.__module__}.{cls.__qualname__}); uninstall one of them or block it "
                "with DATAFLEX_BLOCK_PLUGINS"
            )
        table[name] = ComponentSpec(kind, name, cls, plugin)

    def get(self, kind: str, name: str) -> ComponentSpec | None:
        return self.components[kind].get(name)

    def names(self, kind: str) -> list[str]:
        return sorted(self.components[kind])

    def close_match(self, kind: str, name: str) -> str | None:
        matches = difflib.get_close_matches(name, self.names(kind), n=1, cutoff=0.6)
        return matches[0] if matches else None

    def find_kind(self, name: str) -> list[str]:
        """Kinds under which ``name`` is registered."""
        return [kind for kind in KINDS if name in self.components[kind]]

    def __iter__(self) -> Iterator[ComponentSpec]:
        for kind in KINDS:
            for name in sorted(self.components[kind]):
                yield self.components[kind][name]

    def by_plugin(self) -> dict[PluginInfo, list[ComponentSpec]]:
        out: dict[PluginInfo, list[ComponentSpec]] = {}
        for spec in self:
            out.setdefault(spec.plugin, []).append(spec)
        return out
