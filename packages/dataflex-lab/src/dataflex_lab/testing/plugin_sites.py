"""Plugin distributions installed for one test: lock, discovery and pinning tests see real installs.

- :class:`PipSite`: a throwaway virtualenv into which pip really installs
  minimal wheels (:func:`build_wheel`), so RECORD, INSTALLER, the compiled
  ``__pycache__`` and upgrades are what pip writes in production; its
  site-packages goes on ``sys.path``, alone (the core's lock tests: the test's
  whole environment) or in front of what is installed (a host's tests, beside
  the framework).
- :class:`FakeSite`: a directory of installed-looking distributions (a
  ``dist-info`` with metadata and entry points, and their modules), for
  discovery tests that need no pip.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import importlib.metadata
import shutil
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dataflex_core import ENTRY_POINT_GROUP, ENV_PLUGINS_LOCK, reset_plugin_manager

#: The plugins lock and pinning tests install (as the package ``lk_good``, ``lk_extra``, ``lk_tripwire``):
#: a scorer ``lk_length``, another scorer ``lk_extra``, and a module whose import leaves a marker file
#: ``IMPORTED`` beside it and then fails: proof that it was imported.
LENGTH_PLUGIN = """
from dataflex_core import Scorer, register_scorer


@register_scorer("lk_length")
class LengthScorer(Scorer):
    requires = ["advantages"]

    def score(self, batch, step_id, **ctx):
        return batch.batch["response_mask"].sum(-1).float()
"""
EXTRA_PLUGIN = """
from dataflex_core import Scorer, register_scorer


@register_scorer("lk_extra")
class ExtraScorer(Scorer):
    def score(self, batch, step_id, **ctx):
        return batch.batch["response_mask"].sum(-1).float()
"""
TRIPWIRE_PLUGIN = """
from pathlib import Path

Path(__file__).with_name("IMPORTED").write_text("lk_tripwire was imported")
raise RuntimeError("lk_tripwire must never be imported under a lock that does not list it")
"""


def build_wheel(out: Path, dist: str, version: str, files: dict[str, str], entry_points: dict[str, str]) -> Path:
    """A minimal pure-Python wheel with ``files`` (path -> text) and ``dataflex`` entry points, so pip performs a
    real install."""
    stem = dist.replace("-", "_")
    info = f"{stem}-{version}.dist-info"
    files = dict(files)
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
    files[f"{info}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: dataflex-lab\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[f"{info}/entry_points.txt"] = f"[{ENTRY_POINT_GROUP}]\n" + "".join(
        f"{k} = {v}\n" for k, v in entry_points.items()
    )
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
    """The entries of ``sys.path`` that hold the standard library (no site-packages)."""
    base = Path(sys.base_prefix).resolve()
    return [
        p
        for p in sys.path
        if p and Path(p).resolve().is_relative_to(base) and not {"site-packages", "dist-packages"} & set(Path(p).parts)
    ]


class PipSite:
    """A throwaway virtualenv whose site-packages goes on ``sys.path``; pip installs and upgrades into it."""

    def __init__(self, venv: Path, wheels: Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        self.python = venv / "bin" / "python"
        (self.root,) = venv.glob("lib/python3*/site-packages")
        self.wheels = wheels
        self.modules: set[str] = set()

    def install(self, dist: str, version: str, module: str, source: str) -> None:
        """Build and pip-install ``dist==version``: one package ``module`` (its ``__init__.py`` is ``source``),
        entry point ``module``."""
        self.install_files(dist, version, {f"{module.replace('.', '/')}/__init__.py": source}, {module: module})

    def install_files(self, dist: str, version: str, files: dict[str, str], entry_points: dict[str, str]) -> None:
        """Build and pip-install ``dist==version`` holding ``files`` (path -> text) and ``entry_points``."""
        wheel = build_wheel(self.wheels / f"{dist}-{version}", dist, version, files, entry_points)
        self.pip("install", "--no-deps", "--no-index", str(wheel))

    def install_many(self, dists: list[tuple[str, str, dict[str, str], dict[str, str]]]) -> None:
        """Build and pip-install several ``(dist, version, files, entry_points)`` in one pip run."""
        wheels = [build_wheel(self.wheels / f"{d}-{v}", d, v, files, eps) for d, v, files, eps in dists]
        self.pip("install", "--no-deps", "--no-index", *map(str, wheels))

    def uninstall(self, dist: str) -> None:
        self.pip("uninstall", "--yes", dist)

    def keep(self) -> None:
        """Remember the site as installed now; :meth:`reset` puts it back (tests sharing one install)."""
        for live in self._trees():
            kept = live.with_name("site-packages.kept")
            shutil.rmtree(kept, ignore_errors=True)
            if live.exists():
                shutil.copytree(live, kept, symlinks=True)

    def reset(self) -> None:
        """The site as :meth:`keep` left it, and none of its modules imported."""
        for live in self._trees():
            shutil.rmtree(live, ignore_errors=True)
            if live.with_name("site-packages.kept").exists():
                shutil.copytree(live.with_name("site-packages.kept"), live, symlinks=True)
        self.forget_modules()

    def _trees(self) -> list[Path]:
        """The site, and where Python keeps its bytecode under ``sys.pycache_prefix``: planted bytecode there would
        outlive a reset, since the restored files keep their mtime and size."""
        if not sys.pycache_prefix:
            return [self.root]
        return [self.root, Path(sys.pycache_prefix) / self.root.relative_to(self.root.anchor)]

    def hide(self, *dists: str) -> None:
        """Make installed distributions invisible to ``importlib.metadata`` (as if not installed); see :meth:`show`."""
        for dist in dists:
            for info in self.root.glob(f"{dist.replace('-', '_')}-*.dist-info"):
                info.rename(info.with_name(info.name + ".hidden"))
        importlib.invalidate_caches()

    def show(self, *dists: str) -> None:
        """Undo :meth:`hide`: the distributions are installed again, as pip left them."""
        for dist in dists:
            for info in self.root.glob(f"{dist.replace('-', '_')}-*.dist-info.hidden"):
                info.rename(info.with_name(info.name.removesuffix(".hidden")))
        importlib.invalidate_caches()

    def pip(self, *args: str) -> None:
        command = [sys.executable, "-m", "pip", "--python", str(self.python), "--quiet", "--disable-pip-version-check"]
        subprocess.run([*command, *args], check=True)
        self.modules.update(p.name.removesuffix(".py") for p in self.root.iterdir() if "." not in p.stem)
        self.forget_modules()

    def file(self, module: str) -> Path:
        return self.root / module / "__init__.py"

    def forget_modules(self) -> None:
        """Drop the site's modules from ``sys.modules``, so the next import reads what is installed now."""
        for name in [m for m in sys.modules if m.split(".")[0] in self.modules]:
            del sys.modules[name]
        importlib.invalidate_caches()


def forget_installed_plugins() -> None:
    """Drop every installed plugin's modules and the loaded manager: the state of a job's fresh process."""
    tops = {ep.value.split(":")[0].split(".")[0] for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    for name in [m for m in sys.modules if m.split(".")[0] in tops]:
        del sys.modules[name]
    reset_plugin_manager()
    importlib.invalidate_caches()


@contextmanager
def _fresh_discovery(site: PipSite | FakeSite, forget: Callable[[], None] = reset_plugin_manager) -> Iterator[None]:
    """``forget`` (a fresh plugin manager) while ``site`` is installed, and again once its modules are dropped."""
    forget()
    try:
        yield
    finally:
        site.forget_modules()
        forget()


@contextmanager
def pip_site(root: Path, monkeypatch: Any, *, alone: bool) -> Iterator[PipSite]:
    """A :class:`PipSite` under ``root`` on ``sys.path``, with a fresh plugin manager before and after.

    :param alone: the site and the standard library are the whole ``sys.path`` (modules already imported, such
        as torch and dataflex_core, stay usable), so a lock covers exactly what the test installed; otherwise the
        site goes in front of what is installed (a host's framework stays importable) and the installed plugins'
        modules are forgotten before and after (:func:`forget_installed_plugins`), as in a job's fresh process.
    """
    site = PipSite(root / "venv", root / "wheels")
    if alone:
        monkeypatch.setattr(sys, "path", [str(site.root), *stdlib_path()])
        importlib.invalidate_caches()
    else:
        monkeypatch.setattr(sys, "path", [str(site.root), *sys.path])
    monkeypatch.delenv(ENV_PLUGINS_LOCK, raising=False)
    with _fresh_discovery(site, reset_plugin_manager if alone else forget_installed_plugins):
        yield site


class FakeSite:
    """A directory on ``sys.path`` holding installed-looking distributions (dist-info + modules)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.modules: list[str] = []

    def add_dist(
        self,
        dist: str,
        version: str,
        modules: dict[str, str],
        entry_points: dict[str, str],
        group: str = ENTRY_POINT_GROUP,
    ) -> None:
        """Write ``modules`` (dotted name -> source) and a dist-info whose ``entry_points`` are in ``group``."""
        for module, source in modules.items():
            path = self.root / (module.replace(".", "/") + ".py")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(source))
            self.modules.append(module.split(".")[0])
        info = self.root / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        eps = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
        (info / "entry_points.txt").write_text(f"[{group}]\n{eps}")
        importlib.invalidate_caches()

    def forget_modules(self) -> None:
        for name in set(self.modules):
            for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
                del sys.modules[mod]


@contextmanager
def fake_site(root: Path, monkeypatch: Any) -> Iterator[FakeSite]:
    """A :class:`FakeSite` at ``root`` in front of ``sys.path``, with a fresh plugin manager before and after."""
    site = FakeSite(root)
    site.root.mkdir(parents=True)
    monkeypatch.syspath_prepend(str(site.root))
    with _fresh_discovery(site):
        yield site


def install_into_target(source: Path, target: Path) -> Path:
    """``pip install --no-deps --target target`` a distribution's source folder, built from a copy of it.

    What a user's fresh site holds after ``pip install`` of a third-party plugin: put ``target`` on
    ``PYTHONPATH`` of a subprocess to run with it. The copy keeps the build's ``egg-info`` out of the checkout;
    the build uses this environment's setuptools (``--no-build-isolation``), so no index is needed.
    """
    import shutil

    copy = target.parent / f"{source.name}-src"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
         "--no-build-isolation", "--no-index", "--target", str(target), str(copy)],
        check=True, capture_output=True,
    )  # fmt: skip
    return target
