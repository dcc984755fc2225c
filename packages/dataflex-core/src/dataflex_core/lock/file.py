"""The lock file: a reviewed plugin set as data, and its TOML form.

Per distribution: version, entry points, components and a hash of its installed files, plus the ``dataflex-core``
version; written in a stable order without timestamps, so an unchanged environment locks to an identical file.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w
from packaging.version import InvalidVersion, Version

from ..atomic_write import file_kind, write_text_atomic
from ..components import KINDS, declared_kinds, is_component_name
from ..distributions import canonical_name
from ..errors import DataFlexError
from ..version import __version__

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

#: Format of the lock file; bumped only for changes older readers cannot understand.
LOCK_FORMAT = 1
#: The plugin lock's file name: what ``dataflex lock`` writes and ``dataflex verify`` reads by default,
#: and what a host stores in a checkpoint. The config key ``dataflex.plugins.lock`` and
#: ``$DATAFLEX_PLUGINS_LOCK`` take the path of such a file.
DEFAULT_LOCK_FILE = "dataflex_plugins.lock"
#: The largest lock file read: a lock of thousands of distributions is a few MiB; more is not a lock.
MAX_LOCK_BYTES = 64 * 2**20
CORE_DIST = "dataflex-core"
#: Marker hash of a file listed in RECORD but gone from disk.
MISSING_FILE = "missing"
#: The folder of cached bytecode: never locked, listed only when a cached file is not compiled from its source.
BYTECODE_CACHE = "__pycache__"
#: The pip invocation every restore starts with: ``--force-reinstall`` because pip leaves a satisfied pin alone
#: (changed bytes keep their version), ``--no-deps`` so torch and the rest are not reinstalled.
PIP_REINSTALL = "pip install --force-reinstall --no-deps"
#: How a ``dataflex lock --requirements`` file is restored.
RESTORE_COMMAND = f"{PIP_REINSTALL} -r"

_HEADER = (
    "# dataflex plugin lock: the reviewed set of plugin distributions.\n"
    "# Written by `dataflex lock`, checked by `dataflex verify` and by hosts given this file.\n"
    "# Regenerate it instead of editing it by hand.\n"
)


class LockFileError(DataFlexError, ValueError):
    """A lock file cannot be read or does not have the expected structure."""


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
    #: Why importing its entry points failed: installed records, and a checkpoint's record of its run (a lock
    #: never has one, ``dataflex lock`` refuses a plugin that fails to import).
    load_error: str | None = None
    #: Installed records only: path -> where the file is on this machine, so a lock in force imports those bytes.
    locations: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    #: Installed records only: files other distributions install into its namespace-package folders (absolute
    #: paths), the only files there besides its own that a lock in force lets Python import.
    shared: frozenset[str] = field(default_factory=frozenset, compare=False, repr=False)

    @property
    def startup_files(self) -> list[str]:
        """Its ``.pth`` files in site-packages: Python runs them at every start-up, before any lock is checked."""
        return sorted(rel for rel in self.files if "/" not in rel and rel.endswith(".pth"))

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
        plugins: dict[str, Any] = {}
        for name in self.dist_names:
            rec = self.plugins[name]
            table: dict[str, Any] = {
                "version": rec.version,
                "editable": rec.editable,
                "content_hash": rec.content_hash,
                "entry_points": dict(sorted(rec.entry_points.items())),
            }
            if rec.components is not None:
                table["components"] = {
                    k: list(rec.components[k]) for k in declared_kinds(rec.components) if rec.components[k]
                }
            if rec.load_error is not None:
                table["load_error"] = rec.load_error
            table["files"] = dict(sorted(rec.files.items()))
            plugins[name] = table
        data = {"lock_version": LOCK_FORMAT, "core": {"distribution": CORE_DIST, "version": self.core_version}}
        if plugins:
            data["plugins"] = plugins
        return _HEADER + tomli_w.dumps(data)

    def requirements(self, *, source: str = "") -> str:
        """``name==version`` pins of dataflex-core and every plugin, for image builds.

        :raises LockFileError: a name or version that is not one (an installed distribution's metadata is checked
            as a lock's fields are), so nothing but a pin reaches a line pip reads.
        """
        origin = f" (from {source!r})" if source else ""  # repr: a newline in a path starts no pip line
        where = source or "the installed environment"
        lines = [
            f"# dataflex plugin set{origin}; restore it with `{RESTORE_COMMAND} <this file>`",
            f"{CORE_DIST}=={_version(self.core_version, where, 'core.version')}",
        ]
        for name in self.dist_names:
            rec = self.plugins[name]
            _dist_name(name, where, f"plugins key {name!r}")
            _version(rec.version, where, f"plugins.{name!r}.version")
            note = "  # editable install when locked: publish this version first" if rec.editable else ""
            lines.append(f"{name}=={rec.version}{note}")
        return "\n".join(lines) + "\n"

    def summary(self) -> str:
        """One line naming every distribution and version, for a start-of-run log."""
        plugins = ", ".join(f"{n}=={self.plugins[n].version}" for n in self.dist_names) or "no plugins"
        return f"{CORE_DIST}=={self.core_version}; {plugins}"


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


def _components(raw: Any, source: str, where: str) -> dict[str, tuple[str, ...]]:
    _expect(isinstance(raw, dict), source, where, "a table", raw)
    kind_name = f"a kind name ({', '.join(KINDS)}, mechanism or a plugin's)"
    for kind, names in raw.items():
        _expect(is_component_name(kind), source, f"{where} key", kind_name, kind)
        listed = isinstance(names, list) and all(is_component_name(n) for n in names)
        _expect(listed, source, f"{where}.{kind}", "a list of names (lower-case identifiers)", names)
    return {kind: tuple(sorted(names)) for kind, names in raw.items() if names}


#: A distribution name as PEP 508 writes it (letters, digits, ``.``, ``_``, ``-``; a letter or digit at each end).
_DIST_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
#: A file's hash as ``dataflex lock`` writes it: a lower-case hex digest (or :data:`MISSING_FILE`).
_HEX_DIGEST = re.compile(r"[0-9a-f]+")


def _dist_name(raw: Any, source: str, where: str) -> str:
    _expect(isinstance(raw, str) and _DIST_NAME.fullmatch(raw) is not None, source, where, "a distribution name (PEP 508)", raw)  # fmt: skip
    return canonical_name(raw)


def _version(raw: Any, source: str, where: str) -> str:
    """A PEP 440 version, the only text of a lock that reaches a ``--requirements`` pin besides the name (packaging
    forgives surrounding space; a pin line does not)."""
    try:
        valid = isinstance(raw, str) and raw.strip() == raw and Version(raw) is not None
    except InvalidVersion:
        valid = False
    _expect(valid, source, where, "a version (PEP 440, e.g. 1.2.0)", raw)
    return raw


def _hashes(raw: Any, source: str, where: str) -> dict[str, str]:
    files = _str_table(raw, source, where)
    for rel, digest in files.items():
        _expect(digest == MISSING_FILE or _HEX_DIGEST.fullmatch(digest) is not None, source, f"{where}.{rel!r}", "a hex digest", digest)  # fmt: skip
    return files


def parse_lock(text: str, source: str = "<lock>") -> PluginSet:
    """A :class:`PluginSet` from lock-file text; every structural problem names the key."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LockFileError(f"{source} is not valid TOML ({exc}); regenerate it with `dataflex lock`") from exc
    except RecursionError:  # tables or arrays nested thousands deep: no lock `dataflex lock` writes nests so
        raise LockFileError(
            f"{source} nests its tables or arrays too deeply to read, so `dataflex lock` did not write it; "
            "regenerate it with `dataflex lock`"
        ) from None
    fmt = data.get("lock_version")
    if fmt != LOCK_FORMAT:
        raise LockFileError(
            f"{source} has lock_version={fmt!r}, but dataflex-core {__version__} reads lock_version={LOCK_FORMAT}; "
            "regenerate it with this `dataflex lock`, or upgrade dataflex-core if a newer one wrote it"
        )
    core = data.get("core")
    _expect(isinstance(core, dict), source, "core", "a table", core)
    _version(core.get("version"), source, "core.version")
    plugins_raw = data.get("plugins", {})
    _expect(isinstance(plugins_raw, dict), source, "plugins", "a table", plugins_raw)
    plugins = {}
    for name, raw in plugins_raw.items():
        where = f"plugins.{name!r}"
        _expect(isinstance(raw, dict), source, where, "a table", raw)
        editable, load_error = raw.get("editable", False), raw.get("load_error")
        _expect(isinstance(editable, bool), source, f"{where}.editable", "true or false", editable)
        _expect(
            load_error is None or isinstance(load_error, str), source, f"{where}.load_error", "a string", load_error
        )
        record = DistRecord(
            name=_dist_name(name, source, f"plugins key {name!r}"),
            version=_version(raw.get("version"), source, f"{where}.version"),
            entry_points=_str_table(raw.get("entry_points", {}), source, f"{where}.entry_points"),
            components=_components(raw["components"], source, f"{where}.components") if "components" in raw else None,
            files=_hashes(raw.get("files", {}), source, f"{where}.files"),
            editable=editable,
            load_error=load_error,
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
    """Read a lock file; a path that is no regular file (missing, a directory, a FIFO, a device, ``-``) or one
    larger than any lock is an error naming it and what to do, at once (a FIFO or ``/dev/zero`` is never read)."""
    path = Path(path)
    create = f"create it with `dataflex lock -o {shlex.quote(str(path))}`"
    if str(path) == "-":
        raise LockFileError(
            "a plugin lock is read from a file, not from standard input ('-'); write one with "
            f"`dataflex lock -o {DEFAULT_LOCK_FILE}` and pass its path"
        )
    try:
        # O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer; the mode is checked next
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except (FileNotFoundError, NotADirectoryError):
        raise LockFileError(f"plugin lock {str(path)!r} does not exist; {create}") from None
    except OSError as exc:
        raise LockFileError(f"plugin lock {str(path)!r} cannot be read: {exc.strerror or exc}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            inside = shlex.quote(str(path / DEFAULT_LOCK_FILE))
            raise LockFileError(f"plugin lock {str(path)!r} is a directory; name the lock file, e.g. {inside}")
        raise LockFileError(
            f"plugin lock {str(path)!r} is {file_kind(mode)}, not a regular file; a lock is the file "
            f"`dataflex lock` writes: {create}"
        )
    with open(fd, "rb") as handle:
        data = handle.read(MAX_LOCK_BYTES + 1)
    if len(data) > MAX_LOCK_BYTES:
        raise LockFileError(
            f"plugin lock {str(path)!r} is larger than {MAX_LOCK_BYTES // 2**20} MiB, so it is not a file "
            f"`dataflex lock` wrote; {create}"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LockFileError(
            f"plugin lock {str(path)!r} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}), "
            f"so it is not a file `dataflex lock` wrote; regenerate it with "
            f"`dataflex lock -o {shlex.quote(str(path))}`"
        ) from None
    return parse_lock(text, source=str(path))


def write_lock(plugin_set: PluginSet, path: str | os.PathLike[str]) -> None:
    """Write atomically (temp file + rename), so a reader never sees half a lock."""
    write_text_atomic(path, plugin_set.to_toml())
