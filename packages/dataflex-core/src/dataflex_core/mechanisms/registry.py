"""Where the mechanisms are found: the built-in seven, those registered in-process, and those plugins ship.

A script registers one with :func:`register_mechanism`, a distribution through the
``dataflex_register_mechanisms`` hook; each is found, locked and listed like a component of kind
``mechanism``, the built-in names reserved. The runner resolves a block's mechanism once per mount.
"""

from __future__ import annotations

import sys
from typing import TypeVar

from ..components import MECHANISM_KIND, declare_kind, is_component_name
from ..decorators import DECORATED, DecoratedComponent, forget
from ..errors import ConfigError
from ..lock.enforce import get_registry
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
# plugins register mechanisms as the kind ``mechanism``: subclasses of Mechanism, never a built-in's name
declare_kind(MECHANISM_KIND, Mechanism, reserved=BUILTIN)


def register_mechanism(cls: M) -> M:
    """Class decorator: make ``cls`` the mechanism ``dataflex.mechanism: <cls.name>`` selects.

    Recorded like a decorated component: imported from a distribution it is that distribution's (two holding one
    name clash); outside any, a later class of the same name replaces it (a re-run cell).

    :raises ConfigError: ``cls`` is no :class:`Mechanism`, its name is no lower-case identifier, or a built-in's.
    """
    if not (isinstance(cls, type) and issubclass(cls, Mechanism)):
        raise ConfigError(f"register_mechanism({cls!r}): a mechanism subclasses dataflex_core.mechanisms.Mechanism")
    name = getattr(cls, "name", "")
    if not is_component_name(name):
        raise ConfigError(
            f"mechanism class {cls.__qualname__} needs a name, a lower-case identifier ([a-z][a-z0-9_]*): "
            f"class attribute name = '...', got {name!r}"
        )
    held = BUILTIN.get(name)
    if held is not None and held is not cls:
        raise ConfigError(
            f"mechanism {name!r} is already registered by {held.__module__}.{held.__qualname__}; "
            f"{cls.__module__}.{cls.__qualname__} needs another name"
        )
    if held is None:
        DECORATED.append(DecoratedComponent(MECHANISM_KIND, name, cls, sys.modules.get(cls.__module__)))
    return cls


def unregister_mechanism(name: str) -> None:
    """Remove the in-process mechanism ``name`` (tests that register their own); a built-in stays."""
    if name in BUILTIN:
        raise ConfigError(f"mechanism {name!r} is built in and cannot be removed")
    forget(MECHANISM_KIND, name)


def get_mechanism(name: str) -> type[Mechanism]:
    """The class registered as ``name``: built in, registered in-process, or shipped by a loaded plugin.

    :raises ConfigError: an unknown name, listing the registered ones.
    :raises DuplicateComponentError: two plugins register ``name``, naming both.
    """
    if not isinstance(name, str):
        raise ConfigError(f"dataflex.mechanism must be a mechanism name, got {name!r}; one of {', '.join(mechanism_names())}")  # fmt: skip
    held = BUILTIN.get(name)
    if held is not None:
        return held
    spec = get_registry().require(MECHANISM_KIND, name)
    if spec is None:
        raise ConfigError(f"dataflex.mechanism={name!r} is not one of {', '.join(mechanism_names())}")
    return spec.cls


def mechanism_names() -> tuple[str, ...]:
    """Every registered mechanism name: the built-ins in their order, then the others (sorted)."""
    return (*BUILTIN, *get_registry().names(MECHANISM_KIND))


def mechanisms() -> tuple[type[Mechanism], ...]:
    """Every registered mechanism class, in the order of :func:`mechanism_names`."""
    return tuple(get_mechanism(name) for name in mechanism_names())
