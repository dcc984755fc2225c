"""The repository's ``noxfile.py``, loaded once for every session test: nox keeps one registry of sessions per
process, and each further load registers every session again (a FutureWarning per session in nox 2026.10, an error
in a later nox)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def noxfile():
    pytest.importorskip("nox")
    spec = importlib.util.spec_from_file_location("dataflex_noxfile", ROOT / "noxfile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
