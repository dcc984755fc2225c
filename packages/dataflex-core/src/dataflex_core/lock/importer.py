"""Import locked plugins from the bytes that were checked, and from nothing else.

Python runs whatever it finds first for a name (stale bytecode, a shadowing folder, a copy earlier on ``sys.path``), so
one finder first on ``sys.meta_path`` compiles each checked module from the bytes it hashes as it reads them, and
refuses a module no distribution installed. It guards files, not the interpreter (docs/production.md's threat model).
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import marshal
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UncheckedModuleError
from .file import BYTECODE_CACHE, MISSING_FILE, DistRecord

_SOURCE, _EXTENSION, _BYTECODE = "source", "extension", "bytecode"


@dataclass(frozen=True)
class CheckedModule:
    """One module of a checked distribution: the file it must come from and that file's sha256."""

    name: str
    path: str
    digest: str
    dist: str
    kind: str
    is_package: bool


def module_of(rel: str) -> tuple[str, str, bool] | None:
    """``(module name, kind, is package)`` of a distribution file Python can import, else ``None``."""
    parts = rel.split("/")
    if BYTECODE_CACHE in parts:
        return None
    *folders, filename = parts
    kinds = [(s, _EXTENSION) for s in importlib.machinery.EXTENSION_SUFFIXES]
    kinds += [(s, _SOURCE) for s in importlib.machinery.SOURCE_SUFFIXES]
    kinds += [(s, _BYTECODE) for s in importlib.machinery.BYTECODE_SUFFIXES]
    for suffix, kind in kinds:
        if filename.endswith(suffix):
            stem = filename[: -len(suffix)]
            names = folders if stem == "__init__" else [*folders, stem]
            if names and all(n.isidentifier() for n in names):
                return ".".join(names), kind, stem == "__init__"
    return None


#: When a distribution has two files for one module, the one Python's path finder picks.
_PRECEDENCE = {(True, _EXTENSION): 0, (True, _SOURCE): 1, (True, _BYTECODE): 2,
               (False, _EXTENSION): 3, (False, _SOURCE): 4, (False, _BYTECODE): 5}  # fmt: skip


def checked_modules(record: DistRecord) -> tuple[dict[str, CheckedModule], dict[str, str]]:
    """The importable modules of an installed record (one with ``locations``), by module name, and its
    namespace packages (folders of its modules without ``__init__``), by name -> folder."""
    modules: dict[str, CheckedModule] = {}
    for rel, digest in sorted(record.files.items()):
        found = module_of(rel)
        location = record.locations.get(rel)
        if found is None or location is None or digest == MISSING_FILE:
            continue
        name, kind, is_package = found
        module = CheckedModule(name, location, digest, record.name, kind, is_package)
        current = modules.get(name)
        if current is None or _PRECEDENCE[(is_package, kind)] < _PRECEDENCE[(current.is_package, current.kind)]:
            modules[name] = module
    namespaces: dict[str, str] = {}
    for module in modules.values():
        folder = Path(module.path).parent.parent if module.is_package else Path(module.path).parent
        parts = module.name.split(".")[:-1]
        while parts:
            name = ".".join(parts)
            if name not in modules:
                namespaces.setdefault(name, str(folder))
            folder, parts = folder.parent, parts[:-1]
    return modules, namespaces


def _verified_bytes(module: CheckedModule) -> bytes:
    try:
        data = Path(module.path).read_bytes()
    except OSError as exc:
        raise ImportError(
            f"{module.path} ({module.dist}) cannot be read: {exc.strerror or exc}", name=module.name, path=module.path
        ) from None
    if hashlib.sha256(data).hexdigest() != module.digest:
        raise ImportError(
            f"{module.path} ({module.dist}) changed after its files were checked (sha256 now "
            f"{hashlib.sha256(data).hexdigest()[:12]}, checked {module.digest[:12]}); it is not imported. "
            "Something is writing into site-packages: reinstall the distribution and keep site-packages read-only",
            name=module.name,
            path=module.path,
        )
    return data


class _Checked:
    """A loader of one checked module (``checked``), which :meth:`CheckedImporter.imported_elsewhere` recognises."""

    def __init__(self, module: CheckedModule) -> None:
        super().__init__(module.name, module.path)  # type: ignore[call-arg]
        self.checked = module


class _CheckedSourceLoader(_Checked, importlib.machinery.SourceFileLoader):
    """Compiles the checked source bytes; never reads or writes cached bytecode."""

    def get_code(self, fullname: str) -> Any:
        return self.source_to_code(_verified_bytes(self.checked), self.path)


class _CheckedBytecodeLoader(_Checked, importlib.machinery.SourcelessFileLoader):
    """A locked sourceless module (``module.pyc`` shipped in the wheel), from its checked bytes."""

    def get_code(self, fullname: str) -> Any:
        data = _verified_bytes(self.checked)
        if data[:4] != importlib.util.MAGIC_NUMBER:
            raise ImportError(f"{self.path} is bytecode for another Python version", name=fullname, path=self.path)
        return marshal.loads(data[16:])


class _CheckedExtensionLoader(_Checked, importlib.machinery.ExtensionFileLoader):
    """A locked extension module, hashed again just before the dynamic loader opens it."""

    def create_module(self, spec: Any) -> Any:
        _verified_bytes(self.checked)
        return super().create_module(spec)


_LOADERS = {_SOURCE: _CheckedSourceLoader, _BYTECODE: _CheckedBytecodeLoader, _EXTENSION: _CheckedExtensionLoader}


class CheckedImporter(importlib.abc.MetaPathFinder):
    """The finder for checked distributions' modules; first on ``sys.meta_path`` while any is registered."""

    def __init__(self) -> None:
        self.modules: dict[str, CheckedModule] = {}
        #: Namespace packages holding checked modules: name -> ``(dist, folder)`` per distribution.
        self.namespaces: dict[str, list[tuple[str, str]]] = {}
        #: Files other distributions install into checked namespace folders: importable there (absolute paths).
        self.shared: frozenset[str] = frozenset()

    def _enclosing_package(self, fullname: str) -> str | None:
        """The checked distribution whose regular package (an ``__init__``) holds ``fullname``: every name inside
        it is theirs."""
        parts = fullname.split(".")
        for end in range(len(parts) - 1, 0, -1):
            module = self.modules.get(".".join(parts[:end]))
            if module is not None and module.is_package:
                return module.dist
        return None

    def owner(self, fullname: str) -> str | None:
        """The checked distribution that answers for ``fullname``, if any."""
        if fullname in self.modules:
            return self.modules[fullname].dist
        if fullname in self.namespaces:
            return self.namespaces[fullname][0][0]
        return self._enclosing_package(fullname)

    def _namespace_spec(self, fullname: str, path: Any) -> Any:
        """A namespace package: the checked folders, plus other distributions' portions without ``__init__``."""
        folders = [folder for _, folder in self.namespaces[fullname]]
        if self._enclosing_package(fullname) is None:
            last = fullname.rpartition(".")[2]
            for entry in sys.path if path is None else path:
                folder = Path(entry or ".", last)
                inits = [folder / f"__init__{s}" for s in importlib.machinery.all_suffixes()]
                if folder.is_dir() and str(folder) not in folders and not any(i.exists() for i in inits):
                    folders.append(str(folder))
        spec = importlib.machinery.ModuleSpec(fullname, None, is_package=True)
        spec.submodule_search_locations = folders
        return spec

    def _planted_in_namespace(self, fullname: str) -> str | None:
        """The checked distribution whose namespace folder holds ``fullname`` as a file no distribution
        installed (planted), else ``None``: other distributions' portions of the namespace stay importable."""
        parent = fullname.rpartition(".")[0]
        owners = self.namespaces.get(parent) if parent not in self.modules else None
        if not owners:
            return None
        for dist, folder in owners:
            spec = importlib.machinery.PathFinder.find_spec(fullname, [folder])
            if spec is None:
                continue
            if spec.has_location and spec.origin:
                where = os.path.normpath(spec.origin)
                if where not in self.shared:
                    return dist
            else:  # a folder without __init__: planted unless another distribution installs files in it
                inside = tuple(os.path.normpath(p) + os.sep for p in spec.submodule_search_locations or ())
                if not any(p.startswith(inside) for p in self.shared):
                    return dist
        return None

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        module = self.modules.get(fullname)
        if module is None and fullname in self.namespaces:
            return self._namespace_spec(fullname, path)
        if module is None:
            dist = self.owner(fullname) or self._planted_in_namespace(fullname)
            if dist is None:
                return None  # not a checked distribution's: the usual finders answer
            raise UncheckedModuleError(
                f"No module named {fullname!r} among the checked files of {dist} (a file dropped into its package, "
                "or into its namespace folder that no distribution installed, is never imported while it is locked)",
                name=fullname,
            )
        loader = _LOADERS[module.kind](module)
        locations = [str(Path(module.path).parent)] if module.is_package else None
        return importlib.util.spec_from_file_location(
            fullname, module.path, loader=loader, submodule_search_locations=locations
        )

    def add(self, records: Iterable[DistRecord]) -> None:
        """Answer for these distributions' modules from now on (replacing what was registered for them)."""
        records = list(records)
        names = {r.name for r in records}
        self.modules = {n: m for n, m in self.modules.items() if m.dist not in names}
        kept = {n: [(d, f) for d, f in owners if d not in names] for n, owners in self.namespaces.items()}
        self.namespaces = {n: owners for n, owners in kept.items() if owners}
        self.shared = self.shared.union(*(r.shared for r in records))
        for record in records:
            modules, namespaces = checked_modules(record)
            for name, module in modules.items():
                self.modules.setdefault(name, module)
            for name, folder in namespaces.items():
                self.namespaces.setdefault(name, []).append((record.name, folder))

    def imported_elsewhere(self) -> list[str]:
        """``module (dist) from FILE`` for each module of a checked distribution already in ``sys.modules`` that
        was not loaded from its checked file by this finder: code that ran before the lock was in force."""
        found = []
        for name, module in list(sys.modules.items()):
            dist = self.owner(name)
            if dist is None or module is None:
                continue
            if name in self.namespaces and name not in self.modules and getattr(module, "__file__", None) is None:
                continue  # a namespace package runs no code
            loader = getattr(getattr(module, "__spec__", None), "loader", None)
            if name not in self.modules or getattr(loader, "checked", None) != self.modules[name]:
                found.append(f"{name} ({dist}) from {getattr(module, '__file__', None) or 'an unknown location'}")
        return found


#: The process's one checked-import finder.
CHECKED_IMPORTER = CheckedImporter()


def install() -> None:
    """Put :data:`CHECKED_IMPORTER` first on ``sys.meta_path``."""
    uninstall(forget=False)
    sys.meta_path.insert(0, CHECKED_IMPORTER)


def uninstall(*, forget: bool = True) -> None:
    """Take the finder off ``sys.meta_path`` (tests; a process under a lock keeps it to the end)."""
    while CHECKED_IMPORTER in sys.meta_path:
        sys.meta_path.remove(CHECKED_IMPORTER)
    if forget:
        CHECKED_IMPORTER.__init__()  # type: ignore[misc]
