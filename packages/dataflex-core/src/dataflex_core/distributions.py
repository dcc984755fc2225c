"""Installed plugin distributions, read from metadata alone (nothing is imported).

Discovery, locks and conformance all name distributions; they compare them through :func:`canonical_name` (PEP 503, as
pip does), so ``Foo_Bar`` and ``foo-bar`` are one distribution everywhere.
"""

from __future__ import annotations

import importlib.metadata as importlib_metadata

from packaging.utils import canonicalize_name

from .registry import PluginInfo

#: Entry-point group plugins publish themselves under.
ENTRY_POINT_GROUP = "dataflex"


def canonical_name(name: str) -> str:
    """A distribution name as PEP 503 normalises it (``Foo_Bar.baz`` -> ``foo-bar-baz``)."""
    return str(canonicalize_name(name))


def iter_entry_points() -> list[tuple[importlib_metadata.EntryPoint, PluginInfo]]:
    """Installed entry points of group ``dataflex`` with their distribution, deduplicated."""
    seen: set[tuple[str, str, str | None]] = set()
    out = []
    for ep in importlib_metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        dist_name = dist.metadata["Name"] if dist is not None else None
        key = (ep.name, ep.value, dist_name)
        if key in seen:
            continue
        seen.add(key)
        info = PluginInfo(
            name=ep.name,
            value=ep.value,
            dist=dist_name,
            version=dist.version if dist is not None else None,
        )
        out.append((ep, info))
    out.sort(key=lambda pair: (pair[1].dist or "", pair[1].name))
    return out


def plugin_distributions() -> dict[str, importlib_metadata.Distribution]:
    """Installed distributions with a ``dataflex`` entry point, by canonical name (the first on ``sys.path`` when a
    name is installed twice, as for imports)."""
    seen: set[str] = set()
    found = {}
    for dist in importlib_metadata.distributions():
        name = dist.metadata["Name"]
        if not name:
            continue
        key = canonical_name(name)
        if key in seen:
            continue
        seen.add(key)
        if any(ep.group == ENTRY_POINT_GROUP for ep in dist.entry_points):
            found[key] = dist
    return dict(sorted(found.items()))


def dataflex_entry_points(dist: importlib_metadata.Distribution) -> dict[str, str]:
    """``name -> value`` of the distribution's entry points in group ``dataflex``."""
    return {ep.name: ep.value for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP}
