"""Entry points that name a module their distribution does not ship: code a lock could never hash.

Such a module (another distribution's, or a file on ``sys.path``) would run as the locked distribution's while its bytes
were hashed nowhere, so the entry point is never imported under a lock: ``dataflex lock`` refuses the distribution,
``verify`` and a lock in force list it as a row of its own.
"""

from __future__ import annotations

import importlib.metadata as importlib_metadata
from collections.abc import Iterable

from ..distributions import ENTRY_POINT_GROUP
from .compare import OUTSIDE_FIX, Difference, sorted_rows
from .file import DistRecord, PluginSet
from .importer import module_of

__all__ = ["OUTSIDE_FIX", "describe", "entry_point_module", "outside_entry_points", "outside_rows", "shipped_modules"]


def entry_point_module(value: str) -> str:
    """The module an entry point's value (``pkg.mod:attr [extra]``) imports."""
    return importlib_metadata.EntryPoint(name="", value=value, group=ENTRY_POINT_GROUP).module


def shipped_modules(record: DistRecord) -> set[str]:
    """Module names of the importable files the distribution installs (a removed one still counts: that is a
    content difference, not code from elsewhere)."""
    return {found[0] for found in map(module_of, record.files) if found is not None}


def outside_entry_points(record: DistRecord) -> dict[str, str]:
    """Entry-point name -> module, for each entry point whose module ``record`` ships neither as a file nor as a
    namespace package holding its files."""
    shipped = shipped_modules(record)
    outside = {}
    for name, value in sorted(record.entry_points.items()):
        module = entry_point_module(value)
        if module not in shipped and not any(m.startswith(module + ".") for m in shipped):
            outside[name] = module
    return outside


def describe(record: DistRecord, outside: dict[str, str]) -> str:
    """One clause per entry point, e.g. ``entry point hs = other_pkg names module 'other_pkg', which hs-good does
    not ship (...)``."""
    return "; ".join(
        f"entry point {name} = {record.entry_points[name]} names module {module!r}, which {record.name} does not "
        "ship (another distribution's, or a file on sys.path)"
        for name, module in outside.items()
    )


def outside_rows(plugin_set: PluginSet, dists: Iterable[str] | None = None) -> list[Difference]:
    """One ``outside`` row per distribution of ``plugin_set`` (or of ``dists``) with such an entry point."""
    names = plugin_set.dist_names if dists is None else [d for d in dists if d in plugin_set.plugins]
    rows = []
    for name in names:
        record = plugin_set.plugins[name]
        outside = outside_entry_points(record)
        if outside:
            shown = ", ".join(f"{n} = {record.entry_points[n]}" for n in outside)
            rows.append(Difference("outside", name, "-", shown, f"{describe(record, outside)}; never imported"))
    return sorted_rows(rows)
