"""Fixtures: throwaway plugin distributions on sys.path and an isolated plugin manager."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest

import dataflex_core
from dataflex_core import plugins as plugin_module


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
