"""What conformance checks of a mechanism a distribution ships: its declarations, read from the class.

A mechanism runs inside a host's step, so its behaviour is certified where hosts are (the host kit, per
seam); what a plugin author can be told before any host runs it is whether the class says what a host
and the runner read: a name, an ``actuator_kind`` that is a declared component kind, seams that are
:class:`~dataflex_core.step.seams.Seam` classes, ``keys`` as a mapping, scorer ``timings`` from the known
ones, and a ``run`` of its own. Each problem is one line naming the attribute, the value and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping

from dataflex_core.components import BASE_CLASSES, MECHANISM_KIND, TIMINGS
from dataflex_core.mechanisms import Mechanism
from dataflex_core.step.seams import Seam

#: What :func:`mechanism_problems` checks, for the report's note.
MECHANISM_CHECKS = ("name", "actuator_kind", "seams", "keys", "timings", "run")


def mechanism_problems(cls: type) -> list[str]:
    """One line per declaration of mechanism class ``cls`` that a host or the runner cannot use."""
    who = f"mechanism {getattr(cls, 'name', '') or cls.__qualname__!r} ({cls.__module__}.{cls.__qualname__})"
    out = []
    if not isinstance(cls.name, str) or not cls.name:
        out.append(f"{who}: name = {cls.name!r}; set name = '...' (the dataflex.mechanism value)")
    kinds = sorted(k for k in BASE_CLASSES if k != MECHANISM_KIND)
    if cls.actuator_kind not in kinds:
        out.append(
            f"{who}: actuator_kind = {cls.actuator_kind!r} is not a declared component kind ({', '.join(kinds)}); "
            "name a shipped kind or declare yours with a base class that sets kind = '...'"
        )
    seams = cls.seams if isinstance(cls.seams, tuple) else ()
    if not isinstance(cls.seams, tuple) or not all(isinstance(s, type) and issubclass(s, Seam) for s in seams):
        out.append(f"{who}: seams = {cls.seams!r}; declare a tuple of dataflex_core.step.seams classes")
    if not isinstance(cls.keys, Mapping):
        out.append(f"{who}: keys = {cls.keys!r}; declare a mapping of block key -> default")
    timings = cls.timings if isinstance(cls.timings, tuple) else (cls.timings,)
    if not isinstance(cls.timings, tuple) or any(t not in TIMINGS for t in timings):
        out.append(f"{who}: timings = {cls.timings!r}; declare a tuple drawn from {', '.join(TIMINGS)}")
    if cls.run is Mechanism.run:
        out.append(f"{who}: does not implement run() (or subclass LossMechanism and implement weights())")
    return out
