"""Real plugin distributions for lock tests: wheels pip installs into a throwaway virtualenv.

RECORD, INSTALLER and the compiled ``__pycache__`` are what pip writes in
production, and upgrades really uninstall. The core's lock tests make the
throwaway site-packages the test's whole environment; a host's tests put it
in front of ``sys.path`` beside the framework (the hosts import this module
from here).
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import importlib.metadata
import importlib.util
import marshal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from dataflex_core import ENTRY_POINT_GROUP, reset_plugin_manager

#: Code an attacker gets to run: it leaves the marker file ``$HS_MARKER``, so a test sees that it ran.
HOSTILE = """
import os
from pathlib import Path

Path(os.environ["HS_MARKER"]).write_text(__name__ + " ran code that is not in the lock")
BEHAVIOUR = "hostile"
"""


@pytest.fixture(name="marker")
def marker_fixture(tmp_path, monkeypatch) -> Path:
    """``marker``: where :data:`HOSTILE` code and :class:`RunsCode` leave their mark (import this into a test module)."""
    path = tmp_path / "HOSTILE-CODE-RAN"
    monkeypatch.setenv("HS_MARKER", str(path))
    return path


class RunsCode:
    """Pickles as a call of ``open(marker, "w")``: unpickled by anything but a data-only loader, it creates ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def build_wheel(out: Path, dist: str, version: str, files: dict[str, str], entry_points: dict[str, str]) -> Path:
    """A minimal pure-Python wheel with ``files`` (path -> text) and ``dataflex`` entry points."""
    stem = dist.replace("-", "_")
    info = f"{stem}-{version}.dist-info"
    files = dict(files)
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
    files[f"{info}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: dataflex-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[f"{info}/entry_points.txt"] = "[dataflex]\n" + "".join(f"{k} = {v}\n" for k, v in entry_points.items())
    record = []
    for path, text in files.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = "\n".join(record) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    wheel = out / f"{stem}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return wheel


def stdlib_path() -> list[str]:
    """The entries of ``sys.path`` that belong to the standard library."""
    base = Path(sys.base_prefix).resolve()
    return [
        p
        for p in sys.path
        if p and Path(p).resolve().is_relative_to(base) and not {"site-packages", "dist-packages"} & set(Path(p).parts)
    ]


class PipSite:
    """A throwaway virtualenv's site-packages; pip installs and upgrades into it."""

    def __init__(self, venv: Path, wheels: Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        self.python = venv / "bin" / "python"
        (self.root,) = venv.glob("lib/python3*/site-packages")
        self.wheels = wheels
        self.modules: set[str] = set()

    def install(self, dist: str, version: str, module: str, source: str) -> None:
        """A distribution of one package ``module`` (its ``__init__.py`` is ``source``), entry point ``module``."""
        self.install_files(dist, version, {f"{module.replace('.', '/')}/__init__.py": source}, {module: module})

    def install_files(self, dist: str, version: str, files: dict[str, str], entry_points: dict[str, str]) -> None:
        wheel = build_wheel(self.wheels / f"{dist}-{version}", dist, version, files, entry_points)
        self.pip("install", "--no-deps", "--no-index", str(wheel))

    def uninstall(self, dist: str) -> None:
        self.pip("uninstall", "--yes", dist)

    def pip(self, *args: str) -> None:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                str(self.python),
                "--quiet",
                "--disable-pip-version-check",
                *args,
            ],
            check=True,
        )
        self.modules.update(p.name.removesuffix(".py") for p in self.root.iterdir() if "." not in p.stem)
        self.forget_modules()

    def file(self, module: str) -> Path:
        return self.root / module / "__init__.py"

    def forget_modules(self) -> None:
        """Drop this site's modules from ``sys.modules``, as a fresh process would not have them."""
        for name in [m for m in sys.modules if m.split(".")[0] in self.modules]:
            del sys.modules[name]
        importlib.invalidate_caches()


def plant_bytecode(source: Path, code: str) -> Path:
    """A ``.pyc`` for ``source`` whose header matches it (mtime and size), holding other code: CPython runs it."""
    stat = source.stat()
    header = importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little")
    header += (int(stat.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + (stat.st_size & 0xFFFFFFFF).to_bytes(
        4, "little"
    )
    cache = Path(importlib.util.cache_from_source(str(source)))
    cache.parent.mkdir(exist_ok=True)
    cache.write_bytes(header + marshal.dumps(compile(code, str(source), "exec")))
    return cache


def forget_installed_plugins() -> None:
    """Drop every installed plugin's modules and the loaded manager: the state of a job's fresh process."""
    tops = {ep.value.split(":")[0].split(".")[0] for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    for name in [m for m in sys.modules if m.split(".")[0] in tops]:
        del sys.modules[name]
    reset_plugin_manager()
    importlib.invalidate_caches()
