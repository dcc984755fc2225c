"""What is installed: each plugin distribution's version, entry points and file hashes.

Nothing here imports a plugin, so the installed set can be checked against a
lock before any plugin code runs. Content hashes cover what a distribution
installed into site-packages (its RECORD, minus ``*.dist-info``,
``__pycache__``/``*.pyc`` and files outside site-packages such as
console-script wrappers, whose shebang names the local interpreter). Editable
installs have no code in their RECORD, so their hash covers the source tree
of their top-level packages instead.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as importlib_metadata
import importlib.util
import json
import os
from collections.abc import Collection
from pathlib import Path, PurePosixPath

from .distributions import ENTRY_POINT_GROUP, canonical_name, dataflex_entry_points, plugin_distributions
from .lock_file import CORE_DIST, MISSING_FILE, DistRecord, PluginSet
from .version import __version__

_SKIPPED_SUFFIXES = (".pyc", ".pyo")


def _is_editable(dist: importlib_metadata.Distribution) -> bool:
    text = dist.read_text("direct_url.json")
    if text:
        try:
            return bool(json.loads(text).get("dir_info", {}).get("editable", False))
        except (ValueError, AttributeError):
            return False
    # no RECORD: a legacy develop install or an .egg-info in a source tree
    return dist.read_text("RECORD") is None


def _file_digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return MISSING_FILE


def _skipped(parts: tuple[str, ...]) -> bool:
    return "__pycache__" in parts or parts[-1].endswith(_SKIPPED_SUFFIXES)


def _record_files(dist: importlib_metadata.Distribution) -> dict[str, str]:
    files = {}
    for rel in dist.files or []:
        parts = PurePosixPath(str(rel).replace("\\", "/")).parts
        if not parts or parts[0] == ".." or parts[0].endswith((".dist-info", ".egg-info")) or _skipped(parts):
            continue
        files["/".join(parts)] = _file_digest(Path(dist.locate_file(rel)))
    return files


def _top_level_names(dist: importlib_metadata.Distribution) -> list[str]:
    names = {ep.value.split(":")[0].split(".")[0].strip() for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP}
    names.update(line.strip() for line in (dist.read_text("top_level.txt") or "").splitlines() if line.strip())
    return sorted(n for n in names if n)


def _source_files(dist: importlib_metadata.Distribution) -> dict[str, str]:
    """Files of an editable install: its top-level packages' source trees, found without importing them."""
    files = {}
    for top in _top_level_names(dist):
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            files[f"{top}/"] = MISSING_FILE
            continue
        if spec.submodule_search_locations:
            for location in spec.submodule_search_locations:
                root = Path(location)
                for dirpath, dirnames, filenames in os.walk(root):
                    dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
                    for filename in sorted(filenames):
                        rel = Path(dirpath, filename).relative_to(root)
                        parts = (top, *rel.parts)
                        if not _skipped(parts):
                            files["/".join(parts)] = _file_digest(Path(dirpath, filename))
        elif spec.origin and os.path.isfile(spec.origin):
            files[Path(spec.origin).name] = _file_digest(Path(spec.origin))
    return files


def installed_files(dist: importlib_metadata.Distribution) -> tuple[dict[str, str], bool]:
    """``(path -> sha256 of its bytes, editable)`` for one distribution."""
    if _is_editable(dist):
        return _source_files(dist), True
    return _record_files(dist), False


def core_version() -> str:
    """The installed dataflex-core version (the source tree's when not installed)."""
    try:
        return importlib_metadata.version(CORE_DIST)
    except importlib_metadata.PackageNotFoundError:  # running from a source checkout
        return __version__


def installed_plugin_set(only: Collection[str] | None = None) -> PluginSet:
    """Every installed plugin distribution (or those named in ``only``), hashed; nothing imported.

    Records have ``components=None``: listing components needs an import.
    """
    wanted = None if only is None else {canonical_name(n) for n in only}
    plugins = {}
    for name, dist in plugin_distributions().items():
        if wanted is not None and name not in wanted:
            continue
        files, editable = installed_files(dist)
        plugins[name] = DistRecord(
            name=name,
            version=dist.version,
            entry_points=dataflex_entry_points(dist),
            components=None,
            files=files,
            editable=editable,
        )
    return PluginSet(core_version=core_version(), plugins=plugins)
