"""The pluggy hooks a DataFlex plugin may implement.

Each registration hook receives a ``register`` callback instead of returning classes, so the host owns naming,
attribution to a distribution and the duplicate-name check. Plugins written in the decorator style
(``@register_scorer("name")``) need none of these: the loader turns their decorated classes into implementations of the
same hooks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

PROJECT_NAME = "dataflex"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
#: Marker for hook implementations in plugins: ``@hookimpl def dataflex_register_scorers(register): ...``
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

Register = Callable[..., Any]


@hookspec
def dataflex_register_components(register: Register) -> None:
    """Register the plugin's components of every kind through one callback.

    :param register: callback ``register(cls, name=None)``; the kind is read from the class's base
        (:class:`~dataflex_core.Scorer`, :class:`~dataflex_core.Reweighter`, :class:`~dataflex_core.Selector`,
        :class:`~dataflex_core.Mixer`, :class:`~dataflex_core.Sampler`, :class:`~dataflex_core.Allocator`, or a base
        class of the plugin's own that declares a new kind by setting ``kind = "..."``); ``name`` defaults to
        ``cls.name``. A class that subclasses none of them fails this plugin's registration with an error naming the
        class and the bases.
    :returns: nothing. Duplicate names and failing hooks behave as for :func:`dataflex_register_scorers`.

    Called once per plugin each time the registry is (re)built, before the scorer and reweighter hooks.

    .. versionadded:: 0.3
    """


@hookspec
def dataflex_register_mechanisms(register: Register) -> None:
    """Register the plugin's mechanisms, so ``dataflex.mechanism: <name>`` can select one it ships.

    :param register: callback ``register(cls, name=None)``; ``cls`` must subclass
        :class:`~dataflex_core.mechanisms.Mechanism` and ``name`` defaults to ``cls.name``. A class
        that does not, or a name dataflex-core ships (``reweight``, ``select``, ...), fails this
        plugin's registration with an error naming the class; the other plugins stay usable.
    :returns: nothing. A name two distributions register is a clash, as for components: configuring
        it raises :class:`~dataflex_core.DuplicateComponentError` naming both.

    Called once per plugin each time the registry is (re)built. The mechanism is then locked,
    listed by ``dataflex plugins`` and resolved by every host like a built-in one; the component
    kinds it drives (its ``actuator_kind``, possibly a kind its own distribution declares) are
    registered through :func:`dataflex_register_components`.

    .. versionadded:: 0.3
    """


@hookspec
def dataflex_register_scorers(register: Register) -> None:
    """Register the plugin's :class:`~dataflex_core.Scorer` classes.

    :param register: callback ``register(cls, name=None)``; ``name`` defaults to ``cls.name``. ``cls`` must subclass
        :class:`~dataflex_core.Scorer`.
    :returns: nothing; a return value is ignored. A name another distribution also registers becomes unusable
        (configuring it raises :class:`~dataflex_core.DuplicateComponentError` naming both); the other components stay
        usable. A hook that raises skips this plugin only.

    Called once per plugin each time the registry is (re)built, after every entry point of group ``dataflex`` has been
    imported.

    .. versionadded:: 0.1
    """


@hookspec
def dataflex_register_reweighters(register: Register) -> None:
    """Register the plugin's :class:`~dataflex_core.Reweighter` classes.

    :param register: callback ``register(cls, name=None)``; ``name`` defaults
        to ``cls.name``. ``cls`` must subclass :class:`~dataflex_core.Reweighter`.
    :returns: nothing. The registered class's ``act`` must return non-negative,
        finite weights at the scorer's granularity with mean one over valid units.

    Called once per plugin each time the registry is (re)built.

    .. versionadded:: 0.1
    """


#: The one hook for every kind; the kind comes from the class (``components.kind_of``).
COMPONENTS_HOOK = "dataflex_register_components"

#: The hook for mechanisms (kind ``mechanism``: the class must subclass ``dataflex_core.mechanisms.Mechanism``).
MECHANISMS_HOOK = "dataflex_register_mechanisms"

#: The hooks of the two kinds the project promises by name, beside :data:`COMPONENTS_HOOK`: which registers which.
REGISTRATION_HOOKS = {
    "scorer": "dataflex_register_scorers",
    "reweighter": "dataflex_register_reweighters",
}
