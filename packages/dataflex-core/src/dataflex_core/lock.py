"""Pinned plugin sets: what a production run is allowed to import, and proof it still matches.

A lock file records, per installed ``dataflex`` plugin distribution, its
version, entry points, the components it provides and a hash of the bytes of
the files it installed, plus the ``dataflex-core`` version. ``dataflex verify``
and hosts compare the environment with it; with a lock in force only the
locked distributions' entry points are imported, so an unreviewed plugin that
happens to be installed cannot run code.

Discovery reads metadata only (``importlib.metadata``); components are found
by importing the entry points of the distributions one asks for and nothing
else.

Content hashes cover what a distribution installed into site-packages
(its RECORD, minus ``*.dist-info``, ``__pycache__``/``*.pyc`` and files outside
site-packages such as console-script wrappers, whose shebang names the local
interpreter). Version and entry points live in the dist-info and are compared
on their own rows. Editable installs have no code in their RECORD, so their
hash covers the source tree of their top-level packages instead.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as importlib_metadata
import importlib.util
import json
import os
import re
import sys
import warnings
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from .components import KINDS
from .errors import DataFlexError
from .plugins import ENTRY_POINT_GROUP, DataFlexPluginManager, PluginLoadWarning, iter_entry_points
from .version import __version__

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

#: Format of the lock file; bumped only for changes older readers cannot understand.
LOCK_FORMAT = 1
#: File name ``dataflex lock`` writes and ``dataflex verify`` reads by default.
DEFAULT_LOCK_FILE = "dataflex.lock"
CORE_DIST = "dataflex-core"
#: Marker hash of a file listed in RECORD but gone from disk.
MISSING_FILE = "missing"

_SKIPPED_SUFFIXES = (".pyc", ".pyo")


class LockFileError(DataFlexError, ValueError):
    """A lock file cannot be read or does not have the expected structure."""


class PluginSetMismatch(DataFlexError):
    """The plugin set in use differs from the expected one (a lock or a checkpoint)."""

    def __init__(self, differences: list[Difference], expected_from: str, hint: str = "") -> None:
        self.differences = list(differences)
        self.expected_from = expected_from
        message = f"the dataflex plugin set differs from {expected_from}:\n{format_differences(self.differences)}"
        if hint:
            message += f"\n{hint}"
        super().__init__(message)


class PluginDriftWarning(UserWarning):
    """Version or content drift that ``allow_drift`` accepted."""


def canonical_name(name: str) -> str:
    """A distribution name as PEP 503 normalises it (``Foo_Bar.baz`` -> ``foo-bar-baz``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


# -- the data ----------------------------------------------------------------
@dataclass(frozen=True)
class DistRecord:
    """One plugin distribution as locked, or as found installed."""

    name: str
    version: str
    entry_points: Mapping[str, str]
    #: kind -> component names; ``None`` when its entry points were not imported.
    components: Mapping[str, tuple[str, ...]] | None
    #: installed path (posix, relative) -> sha256 hex of its bytes.
    files: Mapping[str, str]
    editable: bool = False
    #: Why importing its entry points failed (installed records only).
    load_error: str | None = None

    @property
    def content_hash(self) -> str:
        """sha256 over the sorted ``path, file hash`` pairs: one value that changes with any byte."""
        digest = hashlib.sha256()
        for path in sorted(self.files):
            digest.update(f"{path}\0{self.files[path]}\n".encode())
        return f"sha256:{digest.hexdigest()}"


@dataclass(frozen=True)
class PluginSet:
    """The ``dataflex-core`` version plus every plugin distribution, by canonical name."""

    core_version: str
    plugins: Mapping[str, DistRecord] = field(default_factory=dict)

    @property
    def dist_names(self) -> list[str]:
        return sorted(self.plugins)

    def to_toml(self) -> str:
        """The lock file text: stable ordering and no timestamps, so unchanged sets give identical files."""
        lines = [
            "# dataflex plugin lock: the reviewed set of plugin distributions.",
            "# Written by `dataflex lock`, checked by `dataflex verify` and by hosts given this file.",
            "# Regenerate it instead of editing it by hand.",
            f"lock_version = {LOCK_FORMAT}",
            "",
            "[core]",
            f"distribution = {_toml_str(CORE_DIST)}",
            f"version = {_toml_str(self.core_version)}",
        ]
        for name in self.dist_names:
            rec = self.plugins[name]
            table = f"plugins.{_toml_str(name)}"
            lines += [
                "",
                f"[{table}]",
                f"version = {_toml_str(rec.version)}",
                f"editable = {'true' if rec.editable else 'false'}",
                f"content_hash = {_toml_str(rec.content_hash)}",
                "",
                f"[{table}.entry_points]",
                *(f"{_toml_str(k)} = {_toml_str(v)}" for k, v in sorted(rec.entry_points.items())),
            ]
            if rec.components is not None:
                lines += ["", f"[{table}.components]"]
                for kind in KINDS:
                    names = rec.components.get(kind, ())
                    if names:
                        lines.append(f"{kind} = [{', '.join(_toml_str(n) for n in names)}]")
            lines += [
                "",
                f"[{table}.files]",
                *(f"{_toml_str(p)} = {_toml_str(h)}" for p, h in sorted(rec.files.items())),
            ]
        return "\n".join(lines) + "\n"

    def requirements(self, *, source: str = "") -> str:
        """``name==version`` pins of dataflex-core and every plugin, for image builds."""
        origin = f" (from {source})" if source else ""
        lines = [
            f"# dataflex plugin set{origin}; install with `pip install -r <this file>`",
            f"{CORE_DIST}=={self.core_version}",
        ]
        for name in self.dist_names:
            rec = self.plugins[name]
            note = "  # editable install when locked: publish this version first" if rec.editable else ""
            lines.append(f"{name}=={rec.version}{note}")
        return "\n".join(lines) + "\n"

    def summary(self) -> str:
        """One line naming every distribution and version, for a start-of-run log."""
        plugins = ", ".join(f"{n}=={self.plugins[n].version}" for n in self.dist_names) or "no plugins"
        return f"{CORE_DIST}=={self.core_version}; {plugins}"


# -- TOML writing (the subset the lock needs) ----------------------------------
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _toml_str(value: str) -> str:
    out = []
    for ch in value:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


# -- reading -------------------------------------------------------------------
def _expect(cond: bool, source: str, where: str, what: str, value: Any) -> None:
    if not cond:
        raise LockFileError(
            f"{source}: {where} must be {what}, got {value!r}; regenerate the file with `dataflex lock`"
        )


def _str_table(value: Any, source: str, where: str) -> dict[str, str]:
    _expect(isinstance(value, dict), source, where, "a table", value)
    for key, item in value.items():
        _expect(isinstance(item, str), source, f"{where}.{key}", "a string", item)
    return dict(value)


def parse_lock(text: str, source: str = "<lock>") -> PluginSet:
    """A :class:`PluginSet` from lock-file text; every structural problem names the key."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LockFileError(f"{source} is not valid TOML ({exc}); regenerate it with `dataflex lock`") from exc
    fmt = data.get("lock_version")
    if fmt != LOCK_FORMAT:
        raise LockFileError(
            f"{source} has lock_version={fmt!r}, but dataflex-core {__version__} reads lock_version={LOCK_FORMAT}; "
            "regenerate it with this `dataflex lock`, or upgrade dataflex-core if a newer one wrote it"
        )
    core = data.get("core")
    _expect(isinstance(core, dict) and isinstance(core.get("version"), str), source, "core.version", "a string", core)
    plugins_raw = data.get("plugins", {})
    _expect(isinstance(plugins_raw, dict), source, "plugins", "a table", plugins_raw)
    plugins = {}
    for name, raw in plugins_raw.items():
        where = f"plugins.{name!r}"
        _expect(isinstance(raw, dict), source, where, "a table", raw)
        _expect(isinstance(raw.get("version"), str), source, f"{where}.version", "a string", raw.get("version"))
        components = None
        if "components" in raw:
            comps = raw["components"]
            _expect(isinstance(comps, dict), source, f"{where}.components", "a table", comps)
            for kind, names in comps.items():
                _expect(kind in KINDS, source, f"{where}.components key", f"one of {', '.join(KINDS)}", kind)
                _expect(
                    isinstance(names, list) and all(isinstance(n, str) for n in names),
                    source,
                    f"{where}.components.{kind}",
                    "a list of names",
                    names,
                )
            components = {kind: tuple(sorted(names)) for kind, names in comps.items() if names}
        record = DistRecord(
            name=canonical_name(name),
            version=raw["version"],
            entry_points=_str_table(raw.get("entry_points", {}), source, f"{where}.entry_points"),
            components=components,
            files=_str_table(raw.get("files", {}), source, f"{where}.files"),
            editable=bool(raw.get("editable", False)),
        )
        stated = raw.get("content_hash")
        if stated is not None and stated != record.content_hash:
            raise LockFileError(
                f"{source}: {where}.content_hash={stated!r} does not match its files table "
                f"({record.content_hash}); the file was edited by hand, regenerate it with `dataflex lock`"
            )
        plugins[record.name] = record
    return PluginSet(core_version=core["version"], plugins=plugins)


def read_lock(path: str | os.PathLike[str]) -> PluginSet:
    """Read a lock file; a missing file is an error naming the path and how to create it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LockFileError(
            f"plugin lock {str(path)!r} does not exist; create it with `dataflex lock -o {path}`"
        ) from None
    return parse_lock(text, source=str(path))


def write_lock(plugin_set: PluginSet, path: str | os.PathLike[str]) -> None:
    """Write atomically (temp file + rename), so a reader never sees half a lock."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(plugin_set.to_toml(), encoding="utf-8")
    os.replace(tmp, path)


# -- the environment -------------------------------------------------------------
def plugin_distributions() -> dict[str, importlib_metadata.Distribution]:
    """Installed distributions with a ``dataflex`` entry point, by canonical name; metadata only.

    When a name is installed twice on ``sys.path`` the first wins, as it does for imports
    and for :func:`importlib.metadata.entry_points`.
    """
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


def _entry_points(dist: importlib_metadata.Distribution) -> dict[str, str]:
    return {ep.name: ep.value for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP}


def load_plugins(dists: Collection[str], manager: DataFlexPluginManager | None = None) -> DataFlexPluginManager:
    """Import the entry points of ``dists`` (canonical names) and of no other distribution.

    Load failures are kept on ``manager.failures`` rather than warned about; the
    caller reports them as differences.
    """
    manager = manager if manager is not None else DataFlexPluginManager()
    wanted = {canonical_name(d) for d in dists}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PluginLoadWarning)
        for ep, info in iter_entry_points():
            if info.dist is not None and canonical_name(info.dist) in wanted:
                manager.load_entrypoint(ep, info, strict=False)
    return manager


def components_by_dist(manager: DataFlexPluginManager) -> dict[str, dict[str, tuple[str, ...]]]:
    """kind -> sorted component names, per canonical distribution name, of the loaded plugins."""
    out: dict[str, dict[str, list[str]]] = {}
    for spec in manager.registry():
        if spec.plugin.dist:
            out.setdefault(canonical_name(spec.plugin.dist), {}).setdefault(spec.kind, []).append(spec.name)
    return {dist: {kind: tuple(sorted(names)) for kind, names in kinds.items()} for dist, kinds in out.items()}


def _load_errors(manager: DataFlexPluginManager) -> dict[str, str]:
    errors: dict[str, str] = {}
    for failure in manager.failures:
        if failure.plugin.dist:
            key = canonical_name(failure.plugin.dist)
            text = f"{failure.plugin.name}: {type(failure.error).__name__}: {failure.error}"
            errors[key] = f"{errors[key]}; {text}" if key in errors else text
    return errors


def scan_environment(
    *,
    load: Collection[str] | None = None,
    manager: DataFlexPluginManager | None = None,
) -> PluginSet:
    """The installed plugin set, with components of the distributions whose entry points are imported.

    :param load: canonical names of the distributions whose entry points may be
        imported to list their components; ``None`` imports every installed plugin
        (what ``dataflex lock`` does). Others get ``components=None``.
    :param manager: a manager that already loaded the plugins (a host's); nothing
        more is imported, its loaded distributions give the components.
    """
    dists = plugin_distributions()
    if manager is None:
        manager = load_plugins(dists if load is None else [d for d in dists if d in {canonical_name(n) for n in load}])
    loaded = {canonical_name(i.dist) for i in manager.plugin_infos.values() if i.dist}
    errors = _load_errors(manager)
    attempted = loaded | set(errors)
    components = components_by_dist(manager)
    plugins = {}
    for name, dist in dists.items():
        files, editable = installed_files(dist)
        plugins[name] = DistRecord(
            name=name,
            version=dist.version,
            entry_points=_entry_points(dist),
            components=components.get(name, {}) if name in attempted and name not in errors else None,
            files=files,
            editable=editable,
            load_error=errors.get(name),
        )
    return PluginSet(core_version=_core_version(), plugins=plugins)


def _core_version() -> str:
    try:
        return importlib_metadata.version(CORE_DIST)
    except importlib_metadata.PackageNotFoundError:  # running from a source checkout
        return __version__


def lock_environment() -> PluginSet:
    """The plugin set to write to a lock: every installed plugin, imported to list its components.

    A plugin that fails to import cannot be locked: the error names it.
    """
    plugin_set = scan_environment()
    broken = {n: r.load_error for n, r in plugin_set.plugins.items() if r.load_error}
    if broken:
        listed = "\n".join(f"  {n}=={plugin_set.plugins[n].version}: {e}" for n, e in broken.items())
        raise LockFileError(
            "cannot lock a plugin that fails to import:\n"
            f"{listed}\nfix or uninstall it (pip uninstall ...), then run `dataflex lock` again"
        )
    return plugin_set


# -- comparing -------------------------------------------------------------------
#: Difference kinds, in the order rows are shown, with their labels.
DIFFERENCE_LABELS = {
    "missing": "missing",
    "unexpected": "unexpected",
    "version": "version changed",
    "content": "content changed",
    "entry_points": "entry points changed",
    "components": "components changed",
    "load_failed": "load failed",
}
#: Differences ``allow_drift`` downgrades to a warning.
DRIFT_KINDS = frozenset({"version", "content"})


@dataclass(frozen=True)
class Difference:
    """One row of the verify table."""

    kind: str
    dist: str
    locked: str
    installed: str
    detail: str = ""

    @property
    def label(self) -> str:
        return DIFFERENCE_LABELS[self.kind]

    @property
    def is_drift(self) -> bool:
        return self.kind in DRIFT_KINDS

    def as_dict(self) -> dict[str, str]:
        return {"difference": self.label, "distribution": self.dist, "locked": self.locked,
                "installed": self.installed, "detail": self.detail}  # fmt: skip


def _short(content_hash: str) -> str:
    return content_hash[: len("sha256:") + 12]


def _file_changes(locked: Mapping[str, str], installed: Mapping[str, str]) -> str:
    changes = []
    for path in sorted(set(locked) | set(installed)):
        before, after = locked.get(path), installed.get(path)
        if before == after:
            continue
        if before is None:
            changes.append(f"added {path}")
        elif after is None or after == MISSING_FILE:
            changes.append(f"removed {path}")
        else:
            changes.append(f"modified {path}")
    shown = changes[:5]
    if len(changes) > 5:
        shown.append(f"and {len(changes) - 5} more")
    return "; ".join(shown)


def _ep_text(eps: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(eps.items())) or "-"


def _components_text(components: Mapping[str, tuple[str, ...]]) -> str:
    return "; ".join(f"{k}: {', '.join(components[k])}" for k in KINDS if components.get(k)) or "-"


def compare(expected: PluginSet, actual: PluginSet) -> list[Difference]:
    """Every way ``actual`` differs from ``expected``, one row per difference, sorted by distribution."""
    rows: list[Difference] = []
    if expected.core_version != actual.core_version:
        rows.append(Difference("version", CORE_DIST, expected.core_version, actual.core_version))
    for name in sorted(set(expected.plugins) | set(actual.plugins)):
        want, have = expected.plugins.get(name), actual.plugins.get(name)
        if have is None:
            rows.append(Difference("missing", name, want.version, "-", "locked but not installed"))
            continue
        if want is None:
            rows.append(Difference("unexpected", name, "-", have.version, "installed but not locked; never imported"))
            continue
        if want.version != have.version:
            rows.append(Difference("version", name, want.version, have.version))
        if want.content_hash != have.content_hash:
            rows.append(
                Difference(
                    "content",
                    name,
                    _short(want.content_hash),
                    _short(have.content_hash),
                    _file_changes(want.files, have.files),
                )  # fmt: skip
            )
        if dict(want.entry_points) != dict(have.entry_points):
            rows.append(Difference("entry_points", name, _ep_text(want.entry_points), _ep_text(have.entry_points)))
        if have.load_error:
            rows.append(Difference("load_failed", name, want.version, have.version, have.load_error))
        elif want.components is not None and have.components is not None:
            if _components_text(want.components) != _components_text(have.components):
                rows.append(
                    Difference("components", name, _components_text(want.components), _components_text(have.components))
                )
    order = list(DIFFERENCE_LABELS)
    return sorted(rows, key=lambda d: (d.dist != CORE_DIST, d.dist, order.index(d.kind)))


def format_differences(differences: Iterable[Difference]) -> str:
    """The verify table, one aligned row per difference."""
    rows = [("difference", "distribution", "locked", "installed", "detail")]
    rows += [(d.label, d.dist, d.locked, d.installed, d.detail) for d in differences]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join(("  " + "  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4]).rstrip() for r in rows)


def enforce(
    expected: PluginSet,
    actual: PluginSet,
    *,
    allow_drift: bool = False,
    expected_from: str = "the lock",
    hint: str = "",
) -> list[Difference]:
    """Raise :class:`PluginSetMismatch` on any difference ``allow_drift`` does not accept.

    With ``allow_drift``, version and content changes only warn
    (:class:`PluginDriftWarning`); the accepted differences are returned so the
    host can record them.
    """
    differences = compare(expected, actual)
    refused = [d for d in differences if not (allow_drift and d.is_drift)]
    if refused:
        raise PluginSetMismatch(differences, expected_from, hint)
    if differences:
        warnings.warn(
            f"dataflex plugin set drifted from {expected_from} (accepted by allow_drift):\n"
            f"{format_differences(differences)}",
            PluginDriftWarning,
            stacklevel=2,
        )
    return differences


def restrict_to(plugin_set: PluginSet, dists: Iterable[str]) -> PluginSet:
    """The same set with only the named distributions (canonical names)."""
    keep = {canonical_name(d) for d in dists}
    return replace(plugin_set, plugins={n: r for n, r in plugin_set.plugins.items() if n in keep})
