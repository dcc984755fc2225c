"""The testing kit's pytest fixtures, available in every test of an environment with ``dataflex-lab`` installed.

Registered through the ``pytest11`` entry point, so packages' tests use them
without a conftest of their own (a conftest's fixture of the same name wins).
"""

from __future__ import annotations

import pytest

from .batches import rows_batch
from .plugin_sites import fake_site as _fake_site
from .plugin_sites import pip_site as _pip_site


@pytest.fixture
def batch_factory():
    """:func:`~dataflex_lab.testing.batches.rows_batch`: rows given by hand, as a host hands them over."""
    return rows_batch


@pytest.fixture
def fake_site(tmp_path, monkeypatch):
    """Installed-looking plugin distributions for this test only (:class:`~.plugin_sites.FakeSite`)."""
    with _fake_site(tmp_path / "site", monkeypatch) as site:
        yield site


@pytest.fixture
def only_plugins(monkeypatch):
    """``only_plugins("dist-a", ...)``: discovery sees only these distributions (hides real plugins installed)."""
    from dataflex_core import ENV_ALLOW_PLUGINS, reset_plugin_manager

    def restrict(*dists: str) -> None:
        monkeypatch.setenv(ENV_ALLOW_PLUGINS, ",".join(dists))
        reset_plugin_manager()

    return restrict


@pytest.fixture
def pip_site(tmp_path, monkeypatch):
    """The test's whole environment: a virtualenv pip installs plugin wheels into, plus the standard library.

    Modules already imported (torch, pluggy, dataflex_core) stay usable; plugins installed beside the test run are
    out of sight, so a lock covers exactly what the test installed (:func:`~.plugin_sites.pip_site`).
    """
    with _pip_site(tmp_path, monkeypatch, alone=True) as site:
        yield site


@pytest.fixture
def marker(tmp_path, monkeypatch):
    """Where :data:`~.hostile.HOSTILE` code and :class:`~.hostile.RunsCode` leave their mark (``$HS_MARKER``)."""
    from .hostile import MARKER_ENV

    path = tmp_path / "HOSTILE-CODE-RAN"
    monkeypatch.setenv(MARKER_ENV, str(path))
    return path


@pytest.fixture(scope="session")
def queue():
    """A local Ray + TransferQueue shared by every test of the session that asks for it (needs verl's stack)."""
    from ..verl.sandbox import local_queue

    with local_queue():
        yield
