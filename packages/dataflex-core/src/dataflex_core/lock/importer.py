"""Import locked plugins from the bytes that were checked, and from nothing else.

Left to itself Python runs whatever it finds first for a name: cached
bytecode whose header matches the source, a package folder beside a module of
the same name, a copy of the plugin earlier on ``sys.path`` (``PYTHONPATH``,
the working directory, the script's folder). Checking the files on disk
proves nothing about what then runs.

So once a distribution's files are checked (against a lock, or hashed for
``dataflex lock`` / ``dataflex verify``), one finder at the front of
``sys.meta_path`` answers for its modules: each is loaded from the checked
file, whose bytes are hashed again as they are read and compiled from source
(no bytecode cache is read or written). A module name inside one of its
packages that is not among its checked files is refused. A folder of its
files without ``__init__`` is made a namespace package here, so an
``__init__.py`` of that name elsewhere on ``sys.path`` never runs; the
namespace's other portions (other distributions) stay importable. Extension
modules are re-hashed just before the dynamic loader opens them; that leaves
the window between the check and ``dlopen``, which only a read-only
site-packages closes.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import marshal
import os
import sys
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import BuiltinFunctionType, ModuleType
from typing import Any

from ..errors import PluginLoadError, UncheckedModuleError
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


class _CheckedSourceLoader(importlib.machinery.SourceFileLoader):
    """Compiles the checked source bytes; never reads or writes cached bytecode."""

    def __init__(self, module: CheckedModule) -> None:
        super().__init__(module.name, module.path)
        self.checked = module

    def get_code(self, fullname: str) -> Any:
        return self.source_to_code(_verified_bytes(self.checked), self.path)


class _CheckedBytecodeLoader(importlib.machinery.SourcelessFileLoader):
    """A locked sourceless module (``module.pyc`` shipped in the wheel), from its checked bytes."""

    def __init__(self, module: CheckedModule) -> None:
        super().__init__(module.name, module.path)
        self.checked = module

    def get_code(self, fullname: str) -> Any:
        data = _verified_bytes(self.checked)
        if data[:4] != importlib.util.MAGIC_NUMBER:
            raise ImportError(f"{self.path} is bytecode for another Python version", name=fullname, path=self.path)
        return marshal.loads(data[16:])


class _CheckedExtensionLoader(importlib.machinery.ExtensionFileLoader):
    """A locked extension module, hashed again just before the dynamic loader opens it."""

    def __init__(self, module: CheckedModule) -> None:
        super().__init__(module.name, module.path)
        self.checked = module

    def create_module(self, spec: Any) -> Any:
        _verified_bytes(self.checked)
        return super().create_module(spec)


_LOADERS = {_SOURCE: _CheckedSourceLoader, _BYTECODE: _CheckedBytecodeLoader, _EXTENSION: _CheckedExtensionLoader}


class CheckedImporter(importlib.abc.MetaPathFinder):
    """The finder for checked distributions' modules; first on ``sys.meta_path`` while any is registered."""

    def __init__(self) -> None:
        self.modules: dict[str, CheckedModule] = {}
        #: Regular packages (an ``__init__``) of checked distributions: every name inside them is theirs.
        self.packages: dict[str, str] = {}
        #: Namespace packages holding checked modules: name -> ``(dist, folder)`` per distribution.
        self.namespaces: dict[str, list[tuple[str, str]]] = {}
        #: Every refused import, in order: ``(module, distribution)`` (``from pkg import mod`` turns the refusal
        #: into a plain ``ImportError`` without its cause, so whoever needs to know looks here).
        self.refused: list[tuple[str, str]] = []
        #: Every spec this finder returned, by module name: a module of a checked distribution is its checked
        #: file's only when its ``__spec__`` is one of these objects (identity: a record of equal value is forged).
        self.issued: dict[str, list[importlib.machinery.ModuleSpec]] = {}
        #: Files other distributions install into checked namespace folders: importable there (absolute paths).
        self.shared: frozenset[str] = frozenset()

    def _enclosing_package(self, fullname: str) -> str | None:
        parts = fullname.split(".")
        for end in range(len(parts) - 1, 0, -1):
            dist = self.packages.get(".".join(parts[:end]))
            if dist is not None:
                return dist
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
        spec = self._find_spec(fullname, path)
        if spec is not None:
            self.issued.setdefault(fullname, []).append(spec)
        return spec

    def _find_spec(self, fullname: str, path: Any) -> Any:
        module = self.modules.get(fullname)
        if module is None and fullname in self.namespaces:
            return self._namespace_spec(fullname, path)
        if module is None:
            dist = self.owner(fullname) or self._planted_in_namespace(fullname)
            if dist is None:
                return None  # not a checked distribution's: the usual finders answer
            self.refused.append((fullname, dist))
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

    # -- the table ----------------------------------------------------------------------
    def add(self, records: Iterable[DistRecord], *, refuse_imported: bool) -> None:
        """Answer for these distributions' modules from now on (replacing what was registered for them).

        :param refuse_imported: raise :class:`PluginLoadError` when one of their modules is already in
            ``sys.modules`` from anything but these checked files (its code was never checked).
        """
        records = list(records)
        names = {r.name for r in records}
        table = CheckedImporter()
        table.modules = {n: m for n, m in self.modules.items() if m.dist not in names}
        table.packages = {n: d for n, d in self.packages.items() if d not in names}
        table.shared = self.shared.union(*(r.shared for r in records))
        for name, owners in self.namespaces.items():
            kept = [(d, f) for d, f in owners if d not in names]
            if kept:
                table.namespaces[name] = kept
        for record in records:
            modules, namespaces = checked_modules(record)
            for name, module in modules.items():
                table.modules.setdefault(name, module)
                if module.is_package:
                    table.packages.setdefault(name, module.dist)
            for name, folder in namespaces.items():
                table.namespaces.setdefault(name, []).append((record.name, folder))
        if refuse_imported:
            table.issued = self.issued
            _refuse_imported(table, names)
        self.modules, self.packages, self.namespaces = table.modules, table.packages, table.namespaces
        self.shared = table.shared
        install()


def _spec_of(module: Any) -> Any:
    """A module's ``__spec__`` as the module object holds it (no attribute hook of a forged object runs)."""
    return vars(module).get("__spec__") if isinstance(module, ModuleType) else None


def _plain_namespace(module: Any, name: str) -> bool:
    """A namespace package, whoever made it: no file, and every other attribute is its imported submodule."""
    if not isinstance(module, ModuleType) or vars(module).get("__file__") is not None:
        return False
    extra = {k: v for k, v in vars(module).items() if not (k.startswith("__") and k.endswith("__"))}
    return all(value is sys.modules.get(f"{name}.{key}") for key, value in extra.items())


def _loaded_from_checked(module: Any, table: CheckedImporter, name: str) -> bool:
    if name in table.namespaces and name not in table.modules:
        return _plain_namespace(module, name)  # it runs no code
    spec = _spec_of(module)
    if not any(spec is issued for issued in table.issued.get(name, ())):
        return False  # not a spec this finder returned: another finder's, or forged
    return name in table.modules and getattr(spec.loader, "checked", None) == table.modules[name]


def _origin(module: Any) -> str:
    file = vars(module).get("__file__") if isinstance(module, ModuleType) else None
    return str(file) if file else f"an unknown location ({type(module).__name__} object)"


def unchecked_modules(table: CheckedImporter, dists: Collection[str] | None = None) -> list[str]:
    """``module (dist) from FILE`` for each module in ``sys.modules`` of a checked distribution (of ``dists``)
    that did not come from its checked file through ``table``."""
    found = []
    for name, module in list(sys.modules.items()):
        dist = table.owner(name) if module is not None else None
        if dist is not None and (dists is None or dist in dists) and not _loaded_from_checked(module, table, name):
            found.append(f"{name} ({dist}) from {_origin(module)}")
    return found


def import_replaced() -> str | None:
    """What ``builtins.__import__`` is, when it is not Python's own (start-up code or a plugin replaced it)."""
    builtins_dict = sys._getframe().f_builtins  # what `import` statements use, whatever sys.modules says
    current = builtins_dict.get("__import__")
    own = (
        isinstance(current, BuiltinFunctionType)
        and current.__name__ == "__import__"
        and isinstance(current.__self__, ModuleType)
        and vars(current.__self__) is builtins_dict
    )
    return None if own else repr(current)


def shown(items: list[str]) -> str:
    return "; ".join(items[:5]) + (f"; and {len(items) - 5} more" if len(items) > 5 else "")


def _refuse_imported(table: CheckedImporter, dists: set[str]) -> None:
    unchecked = unchecked_modules(table, dists)
    if unchecked:
        raise PluginLoadError(
            f"locked plugin modules were imported before the lock was in force, so the code that ran was never "
            f"checked: {shown(unchecked)}. Apply the lock before anything imports a plugin (set DATAFLEX_PLUGINS_LOCK "
            "in the job's environment, or build the trainer before importing plugin modules yourself); a module "
            "that no import put there was planted by start-up code (a .pth file, sitecustomize): see what a lock "
            "guarantees in the production guide"
        )
    replaced = import_replaced()
    if replaced is not None:
        raise PluginLoadError(
            f"builtins.__import__ was replaced (it is {replaced}), so an import statement of a locked plugin could "
            "run code the lock never checked; remove what replaces it (start-up code: a .pth file, sitecustomize, "
            "or the job's own code before the lock is applied)"
        )


#: The process's one checked-import finder.
CHECKED_IMPORTER = CheckedImporter()


def install() -> None:
    """Put :data:`CHECKED_IMPORTER` first on ``sys.meta_path`` (again, if a finder was inserted before it)."""
    if sys.meta_path and sys.meta_path[0] is CHECKED_IMPORTER:
        return
    uninstall(forget=False)
    sys.meta_path.insert(0, CHECKED_IMPORTER)


def uninstall(*, forget: bool = True) -> None:
    """Take the finder off ``sys.meta_path`` (tests; a process under a lock keeps it to the end)."""
    while CHECKED_IMPORTER in sys.meta_path:
        sys.meta_path.remove(CHECKED_IMPORTER)
    if forget:
        # ``issued`` stays: a module it loaded is still its checked file's, should a lock list that file again
        CHECKED_IMPORTER.modules, CHECKED_IMPORTER.packages, CHECKED_IMPORTER.namespaces = {}, {}, {}
        CHECKED_IMPORTER.shared = frozenset()
