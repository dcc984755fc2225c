"""The decorator API of the user guide: ``@register_scorer("name")`` and friends.

A decorator only records the class. The plugin loader attributes each record to the entry point whose module defined it;
records no entry point claims (classes defined in a user's script or a test) form the ``__local__`` plugin.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .components import BASE_CLASSES, is_component_name
from .errors import DeclarationError

T = TypeVar("T", bound=type)


@dataclass(frozen=True)
class DecoratedComponent:
    kind: str
    name: str
    cls: type
    #: The module object that defined ``cls`` (None for exec'd code): a re-import replaces it.
    module: Any = field(default=None, compare=False, repr=False)


#: Every decorated class (and every ``register_mechanism`` class), in definition order; only :func:`forget` removes.
DECORATED: list[DecoratedComponent] = []


def forget(kind: str, name: str) -> None:
    """Drop the records of ``kind`` ``name`` (``unregister_mechanism``: a test that registered its own)."""
    DECORATED[:] = [d for d in DECORATED if (d.kind, d.name) != (kind, name)]


def _make_register(kind: str) -> Callable[[str], Callable[[T], T]]:
    base = BASE_CLASSES[kind]

    def register(name: str) -> Callable[[T], T]:
        if not is_component_name(name):
            raise DeclarationError(
                f"register_{kind}(name) needs a lower-case identifier ([a-z][a-z0-9_]*) as the name, got {name!r}"
            )

        def decorate(cls: T) -> T:
            if not (isinstance(cls, type) and issubclass(cls, base)):
                raise DeclarationError(
                    f"@register_{kind}({name!r}) decorates {cls!r}, which is not a subclass of "
                    f"{base.__name__}; inherit from dataflex_core.{base.__name__}"
                )
            cls.name = name
            DECORATED.append(DecoratedComponent(kind, name, cls, sys.modules.get(cls.__module__)))
            return cls

        return decorate

    register.__name__ = register.__qualname__ = f"register_{kind}"
    register.__doc__ = f"Class decorator registering a {base.__name__} under ``name``."
    return register


register_scorer = _make_register("scorer")
register_reweighter = _make_register("reweighter")
register_selector = _make_register("selector")
register_mixer = _make_register("mixer")
register_sampler = _make_register("sampler")
register_allocator = _make_register("allocator")
