"""Where the mechanisms are found: the built-in six, and those registered by other code, in one table.

A mechanism is a :class:`~dataflex_core.mechanisms.Mechanism` subclass; ``dataflex.mechanism`` names
it. The built-in seven (``reweight``, ``select``, ``mix``, ``curriculum``, ``filter``, ``allocate``, ``pilot``) are
imported here; another is registered with :func:`register_mechanism`. The runner resolves a block's
mechanism here once per mount (:func:`get_mechanism`).
"""

from __future__ import annotations

from typing import TypeVar

from ..errors import ConfigError
from .allocate import Allocate
from .base import Mechanism
from .curriculum import Curriculum
from .filter import Filter
from .mix import Mix
from .pilot import Pilot
from .reweight import Reweight
from .select import Select

M = TypeVar("M", bound=type[Mechanism])

#: The built-in mechanisms, in the order users read them.
BUILTIN: dict[str, type[Mechanism]] = {
    cls.name: cls for cls in (Reweight, Select, Mix, Curriculum, Filter, Allocate, Pilot)
}
#: Their names (the modules of this package that hold them).
BUILTIN_MODULES = tuple(BUILTIN)

_registry: dict[str, type[Mechanism]] = {}


def register_mechanism(cls: M) -> M:
    """Class decorator: make ``cls`` the mechanism ``dataflex.mechanism: <cls.name>`` selects.

    :raises ConfigError: the name is empty, or another class already holds it.
    """
    name = getattr(cls, "name", "")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"mechanism class {cls.__qualname__} needs a name (class attribute name = '...')")
    held = BUILTIN.get(name) or _registry.get(name)
    if held is not None and held is not cls:
        raise ConfigError(
            f"mechanism {name!r} is already registered by {held.__module__}.{held.__qualname__}; "
            f"{cls.__module__}.{cls.__qualname__} needs another name"
        )
    if name not in BUILTIN:
        _registry[name] = cls
    return cls


def unregister_mechanism(name: str) -> None:
    """Remove mechanism ``name`` from the table (tests that register their own); a built-in stays."""
    if name in BUILTIN:
        raise ConfigError(f"mechanism {name!r} is built in and cannot be removed")
    _registry.pop(name, None)


def get_mechanism(name: str) -> type[Mechanism]:
    """The class registered as ``name``; an unknown name is an error listing the registered ones."""
    try:
        return BUILTIN.get(name) or _registry[name]
    except (KeyError, TypeError):
        raise ConfigError(f"dataflex.mechanism={name!r} is not one of {', '.join(mechanism_names())}") from None


def mechanism_names() -> tuple[str, ...]:
    """Every registered mechanism name: the built-ins in their order, then the others as registered."""
    return (*BUILTIN, *_registry)


def mechanisms() -> tuple[type[Mechanism], ...]:
    """Every registered mechanism class, in the order of :func:`mechanism_names`."""
    return tuple(get_mechanism(name) for name in mechanism_names())
