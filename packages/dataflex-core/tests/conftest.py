"""Fixtures: throwaway plugin distributions on sys.path (metadata only, or pip-installed) and an isolated plugin manager."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest

import dataflex_core
from dataflex_core import discovery as plugin_module

sys.path.insert(0, str(Path(__file__).parent))

from lock_kit import PipSite, stdlib_path  # noqa: E402


class FakeSite:
    """A directory on ``sys.path`` holding installed-looking distributions (dist-info + modules)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.modules: list[str] = []

    def add_dist(self, dist: str, version: str, modules: dict[str, str], entry_points: dict[str, str]) -> None:
        for module, source in modules.items():
            path = self.root / (module.replace(".", "/") + ".py")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(source))
            self.modules.append(module.split(".")[0])
        info = self.root / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        eps = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
        (info / "entry_points.txt").write_text(f"[dataflex]\n{eps}")
        importlib.invalidate_caches()


@pytest.fixture
def fake_site(tmp_path, monkeypatch):
    """Plugins installed only for this test; only they are loaded (allow-list by distribution)."""
    site = FakeSite(tmp_path / "site")
    site.root.mkdir()
    monkeypatch.syspath_prepend(str(site.root))
    plugin_module.reset_plugin_manager()
    yield site
    for name in set(site.modules):
        for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[mod]
    plugin_module.reset_plugin_manager()


@pytest.fixture
def only_plugins(monkeypatch):
    """Restrict discovery to the named distributions (hides real plugins installed beside core)."""

    def restrict(*dists: str) -> None:
        monkeypatch.setenv(dataflex_core.ENV_ALLOW_PLUGINS, ",".join(dists))
        plugin_module.reset_plugin_manager()

    return restrict


@pytest.fixture
def pip_site(tmp_path, monkeypatch):
    """The test's whole environment: a throwaway venv pip installs into, plus the standard library.

    Modules already imported (torch, pluggy, dataflex_core) stay usable from
    ``sys.modules``, while the plugins installed beside this test run are out of
    sight, so a lock covers exactly what the test installed.
    """
    site = PipSite(tmp_path / "venv", tmp_path / "wheels")
    monkeypatch.setattr(sys, "path", [str(site.root), *stdlib_path()])
    importlib.invalidate_caches()
    monkeypatch.delenv(dataflex_core.ENV_PLUGINS_LOCK, raising=False)
    plugin_module.reset_plugin_manager()
    yield site
    site.forget_modules()
    plugin_module.reset_plugin_manager()
