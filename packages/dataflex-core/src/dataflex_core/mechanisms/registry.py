"""Where the mechanisms are registered: one table, read by the config, the mount checks and every host.

A mechanism is a :class:`~dataflex_core.mechanisms.Mechanism` subclass
registered with :func:`register_mechanism`; ``dataflex.mechanism`` names it.
The built-in six (``reweight``, ``select``, ``mix``, ``curriculum``, ``filter``, ``allocate``) register
themselves the first time the table is read, so importing this module costs
nothing and the table is complete whenever it is consulted.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, TypeVar

from ..errors import ConfigError

if TYPE_CHECKING:
    from .base import Mechanism

M = TypeVar("M", bound="type[Mechanism]")

#: The modules of the built-in mechanisms, in the order users read them.
BUILTIN_MODULES = ("reweight", "select", "mix", "curriculum", "filter", "allocate")

_BUILTIN_PATHS = frozenset(
    [*(f"{__package__}.{module}" for module in BUILTIN_MODULES), f"{__package__}.filter.mechanism"]
)
_registry: dict[str, type[Mechanism]] = {}
_builtins_loaded = False


def _load_builtins() -> None:
    global _builtins_loaded
    if not _builtins_loaded:
        _builtins_loaded = True
        for module in BUILTIN_MODULES:
            importlib.import_module(f"{__package__}.{module}")


def register_mechanism(cls: M) -> M:
    """Class decorator: make ``cls`` the mechanism ``dataflex.mechanism: <cls.name>`` selects.

    :raises ConfigError: the name is empty, or another class already holds it.
    """
    if cls.__module__ not in _BUILTIN_PATHS:
        # another module's mechanism must not take a built-in's name; a built-in module registering itself
        # must not start loading the others (they import each other: allocate and filter read curriculum's)
        _load_builtins()
    name = getattr(cls, "name", "")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"mechanism class {cls.__qualname__} needs a name (class attribute name = '...')")
    held = _registry.get(name)
    if held is not None and held is not cls:
        raise ConfigError(
            f"mechanism {name!r} is already registered by {held.__module__}.{held.__qualname__}; "
            f"{cls.__module__}.{cls.__qualname__} needs another name"
        )
    _registry[name] = cls
    return cls


def unregister_mechanism(name: str) -> None:
    """Remove mechanism ``name`` from the table (tests that register their own); a built-in stays."""
    if name in BUILTIN_MODULES:
        raise ConfigError(f"mechanism {name!r} is built in and cannot be removed")
    _registry.pop(name, None)


def get_mechanism(name: str) -> type[Mechanism]:
    """The class registered as ``name``; an unknown name is an error listing the registered ones."""
    _load_builtins()
    try:
        return _registry[name]
    except (KeyError, TypeError):
        raise ConfigError(f"dataflex.mechanism={name!r} is not one of {', '.join(mechanism_names())}") from None


def mechanism_names() -> tuple[str, ...]:
    """Every registered mechanism name: the built-ins in their order, then the others as registered."""
    _load_builtins()
    builtin = [name for name in BUILTIN_MODULES if name in _registry]
    return (*builtin, *(name for name in _registry if name not in BUILTIN_MODULES))


def mechanisms() -> tuple[type[Mechanism], ...]:
    """Every registered mechanism class, in the order of :func:`mechanism_names`."""
    return tuple(_registry[name] for name in mechanism_names())
