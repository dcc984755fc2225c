"""What is installed: each plugin distribution's version, entry points and file hashes.

Nothing here imports a plugin, so the installed set is checked before any plugin code runs. A distribution's
files are what its RECORD lists in site-packages, plus whatever Python could import in their place or beside
them (unlisted files in its packages, a shadowing folder or extension, stale bytecode, a file planted in its
namespace folder). A clean install has only the first kind, so its hash is the same on every machine.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.metadata as importlib_metadata
import importlib.util
import json
import marshal
import os
from collections.abc import Collection, Mapping
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlparse

from ..distributions import ENTRY_POINT_GROUP, canonical_name, dataflex_entry_points, plugin_distributions
from ..version import __version__
from .file import BYTECODE_CACHE, CORE_DIST, MISSING_FILE, DistRecord, PluginSet
from .importer import module_of

#: Optimization levels a cached ``.pyc`` may be written for (``python``, ``-O``, ``-OO``).
_OPT_LEVELS = ("", 1, 2)


def install_origin(dist: importlib_metadata.Distribution) -> tuple[str | None, bool]:
    """``(the local folder or file pip installed dist from, else None; editable)`` from its ``direct_url.json``
    (PEP 610); without one, editable when it has no RECORD either (a legacy develop install, an .egg-info in a
    source tree)."""
    text = dist.read_text("direct_url.json")
    if not text:
        return None, dist.read_text("RECORD") is None
    try:
        record = json.loads(text)
        url, editable = urlparse(str(record.get("url", ""))), bool(record.get("dir_info", {}).get("editable"))
    except (ValueError, AttributeError):
        return None, False
    return (unquote(url.path) if url.scheme == "file" else None), editable


def _record_locations(dist: importlib_metadata.Distribution) -> dict[str, Path]:
    files = {}
    for rel in dist.files or []:
        parts = PurePosixPath(str(rel).replace("\\", "/")).parts
        if not parts or parts[0] == ".." or parts[0].endswith((".dist-info", ".egg-info")) or BYTECODE_CACHE in parts:
            continue
        files["/".join(parts)] = Path(dist.locate_file(rel))
    return files


def _walk(root: Path, prefix: tuple[str, ...], *, hidden: bool = True) -> dict[str, Path]:
    """Every file under ``root`` but cached bytecode (and dot-folders unless ``hidden``), keyed ``prefix/rel/path``."""
    files = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != BYTECODE_CACHE and (hidden or not d.startswith(".")))
        for filename in sorted(filenames):
            rel = Path(dirpath, filename).relative_to(root)
            files["/".join((*prefix, *rel.parts))] = Path(dirpath, filename)
    return files


def _shadowing_siblings(rel: str, path: Path) -> dict[str, Path]:
    """What Python would import instead of the module ``rel``: a package folder or an extension of that name."""
    if not rel.endswith(".py") or path.name == "__init__.py":
        return {}
    key, package = rel[: -len(".py")], path.with_suffix("")
    found = {f"{key}/__init__{s}": package / f"__init__{s}" for s in importlib.machinery.all_suffixes()}
    found.update({key + s: path.with_name(package.name + s) for s in importlib.machinery.EXTENSION_SUFFIXES})
    return {name: candidate for name, candidate in found.items() if candidate.is_file()}


def _unlisted_files(listed: Mapping[str, Path]) -> dict[str, Path]:
    """Files Python could import from the distribution's packages that its RECORD does not list."""
    packages = {rel[: -len("/__init__.py")] for rel in listed if rel.endswith("/__init__.py")}
    roots = {p for p in packages if p.rpartition("/")[0] not in packages}
    found: dict[str, Path] = {}
    for root in sorted(roots):
        found.update(_walk(listed[f"{root}/__init__.py"].parent, tuple(root.split("/"))))
    for rel, path in listed.items():
        found.update(_shadowing_siblings(rel, path))
    return {rel: path for rel, path in found.items() if rel not in listed}


def _namespace_folders(listed: Mapping[str, Path]) -> dict[str, Path]:
    """Folders above its modules without an ``__init__`` (namespace packages, outside any regular package of
    it), keyed by path."""
    folders = {}
    for rel, path in listed.items():
        if module_of(rel) is None:
            continue
        parts = rel.split("/")
        for depth in range(1, len(parts)):
            key = "/".join(parts[:depth])
            if any(f"{key}/__init__{s}" in listed for s in importlib.machinery.all_suffixes()):
                break  # a regular package: what is inside it is walked as the package's
            folders[key] = path.parents[len(parts) - 1 - depth]
    return folders


def _installed_under(folders: Collection[Path]) -> set[str]:
    """Every file an installed distribution's RECORD puts under ``folders`` (normalised absolute paths)."""
    roots = tuple(os.path.normpath(f) + os.sep for f in folders)
    owned = set()
    for dist in importlib_metadata.distributions():
        for rel in dist.files or []:
            path = os.path.normpath(dist.locate_file(rel))
            if path.startswith(roots):
                owned.add(path)
    return owned


def _namespace_files(listed: Mapping[str, Path]) -> tuple[dict[str, Path], frozenset[str]]:
    """``(files in its namespace folders that no distribution installed, files other distributions installed
    there)``: the first are hashed as its own (a planted one shows as added), the second stay importable."""
    folders = _namespace_folders(listed)
    if not folders:
        return {}, frozenset()
    owned = _installed_under(folders.values())
    mine = {os.path.normpath(p) for p in listed.values()}
    unowned: dict[str, Path] = {}
    for key, folder in folders.items():
        for rel, path in _walk(folder, tuple(key.split("/"))).items():
            if os.path.normpath(path) not in owned:
                unowned[rel] = path
    return unowned, frozenset(owned - mine)


def _runs_instead_of(cache: Path, source: Path, level: str | int) -> bool:
    """Whether Python would execute ``cache`` for ``source``, and it was not compiled from that source."""
    try:
        data = cache.read_bytes()
        code = source.read_bytes()
        stat = source.stat()
    except OSError:
        return False
    if data[:4] != importlib.util.MAGIC_NUMBER or len(data) < 16:
        return False  # Python ignores it and compiles the source
    flags = int.from_bytes(data[4:8], "little")
    if flags & 0b1:  # hash-based: used as is unless it asks for its source hash to be checked
        if flags & 0b10 and data[8:16] != importlib.util.source_hash(code):
            return False
    elif (int.from_bytes(data[8:12], "little"), int.from_bytes(data[12:16], "little")) != (
        int(stat.st_mtime) & 0xFFFFFFFF,
        stat.st_size & 0xFFFFFFFF,
    ):
        return False  # stale: Python recompiles the source
    try:
        cached = marshal.loads(data[16:])
    except (EOFError, ValueError, TypeError):
        return True
    try:
        compiled = compile(code, str(source), "exec", dont_inherit=True, optimize=0 if level == "" else int(level))
    except (SyntaxError, ValueError):
        return True  # the source does not compile, yet the cache would run
    return cached != compiled


def _foreign_bytecode(listed: Mapping[str, Path]) -> dict[str, Path]:
    """Cached bytecode Python would run for a listed module, keyed beside it under ``__pycache__/``."""
    found = {}
    for rel, source in listed.items():
        if not rel.endswith(".py"):
            continue
        for level in _OPT_LEVELS:
            cache = Path(importlib.util.cache_from_source(str(source), optimization=level))
            if cache.is_file() and _runs_instead_of(cache, source, level):
                parent = rel.rpartition("/")[0]
                found[f"{parent}/{BYTECODE_CACHE}/{cache.name}" if parent else f"{BYTECODE_CACHE}/{cache.name}"] = cache
    return found


def _top_level_names(dist: importlib_metadata.Distribution) -> list[str]:
    names = {ep.value.split(":")[0].split(".")[0].strip() for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP}
    names.update(line.strip() for line in (dist.read_text("top_level.txt") or "").splitlines() if line.strip())
    return sorted(n for n in names if n)


def _source_locations(dist: importlib_metadata.Distribution) -> dict[str, Path | None]:
    """Files of an editable install: its top-level packages' source trees, found without importing them."""
    files: dict[str, Path | None] = {}
    for top in _top_level_names(dist):
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            files[f"{top}/"] = None
            continue
        if spec.submodule_search_locations:
            for location in spec.submodule_search_locations:
                files.update(_walk(Path(location), (top,), hidden=False))
        elif spec.origin and os.path.isfile(spec.origin):
            files[Path(spec.origin).name] = Path(spec.origin)
    return files


def _installed_locations(dist: importlib_metadata.Distribution) -> tuple[dict[str, Path | None], bool, frozenset[str]]:
    """``(path -> where it is, editable, shared)`` for one distribution: every file its hash covers (``None``:
    gone), and the files other distributions install into its namespace folders."""
    if install_origin(dist)[1]:
        listed = _source_locations(dist)
        present = {rel: p for rel, p in listed.items() if p is not None}
        return {**listed, **_foreign_bytecode(present)}, True, frozenset()
    listed = _record_locations(dist)
    unowned, shared = _namespace_files(listed)
    return {**listed, **_unlisted_files(listed), **unowned, **_foreign_bytecode(listed)}, False, shared


def _digests(locations: Mapping[str, Path | None]) -> dict[str, str]:
    """path -> sha256 hex of the file's bytes, or :data:`MISSING_FILE` where it is gone."""
    digests = dict.fromkeys(locations, MISSING_FILE)
    for rel, path in locations.items():
        try:
            digests[rel] = hashlib.sha256(path.read_bytes()).hexdigest() if path is not None else MISSING_FILE
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            pass
    return digests


def installed_files(dist: importlib_metadata.Distribution) -> tuple[dict[str, str], bool]:
    """``(path -> sha256 of its bytes, editable)`` for one distribution."""
    locations, editable, _ = _installed_locations(dist)
    return _digests(locations), editable


def core_version() -> str:
    """The installed dataflex-core version (the source tree's when not installed)."""
    try:
        return importlib_metadata.version(CORE_DIST)
    except importlib_metadata.PackageNotFoundError:  # running from a source checkout
        return __version__


def installed_plugin_set(only: Collection[str] | None = None) -> PluginSet:
    """Every installed plugin distribution (or those named in ``only``), hashed; nothing imported, so records have
    ``components=None``."""
    wanted = None if only is None else {canonical_name(n) for n in only}
    plugins = {}
    for name, dist in plugin_distributions().items():
        if wanted is not None and name not in wanted:
            continue
        locations, editable, shared = _installed_locations(dist)
        plugins[name] = DistRecord(
            name=name,
            version=dist.version,
            entry_points=dataflex_entry_points(dist),
            components=None,
            files=_digests(locations),
            editable=editable,
            locations={rel: str(p) for rel, p in locations.items() if p is not None},
            shared=shared,
        )
    return PluginSet(core_version=core_version(), plugins=plugins)
