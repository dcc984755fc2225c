"""Fixtures for the documentation tests: the tutorial snippets importable, and cleaned up after."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from dataflex_core import get_plugin_manager
from dataflex_core.decorators import DECORATED

DOCS = Path(__file__).resolve().parents[1]
ROOT = DOCS.parent
SNIPPETS = DOCS / "snippets"
SNIPPET_MODULES = {p.stem for p in SNIPPETS.glob("*.py")}


@pytest.fixture
def snippets(monkeypatch):
    """``docs/snippets`` on ``sys.path``, as if the user saved the files next to their script.

    The tutorial components register themselves as local components; they are
    removed again afterwards so later tests see only the installed plugins.
    Installed plugins are loaded first, so removing the snippets' records cannot
    take a plugin's records with them.
    """
    get_plugin_manager()
    monkeypatch.syspath_prepend(str(SNIPPETS))
    yield SNIPPETS
    for name in SNIPPET_MODULES:
        sys.modules.pop(name, None)
    DECORATED[:] = [d for d in DECORATED if d.cls.__module__ not in SNIPPET_MODULES]


def load_hook(name: str):
    """A module of ``docs/hooks`` (they are loaded by path, as mkdocs does)."""
    spec = importlib.util.spec_from_file_location(f"dataflex_docs_hook_{name}", DOCS / "hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def catalog_hook():
    """``docs/hooks/catalog.py``, the mkdocs hook that renders the component catalog."""
    return load_hook("catalog")


@pytest.fixture(scope="session")
def cli_hook():
    """``docs/hooks/cli_help.py``, the mkdocs hook that pastes ``--help`` texts."""
    return load_hook("cli_help")


def _documented_output(page: str, snippet: str) -> str:
    text = (DOCS / page).read_text(encoding="utf-8")
    pattern = re.escape(f"docs/snippets/{snippet}") + r"\n--8<--\n```\n\n```text\n(.*?)\n```"
    match = re.search(pattern, text, re.S)
    assert match, f"{page} does not show the output of {snippet} in a text block after including it"
    return match.group(1)


@pytest.fixture(scope="session")
def documented_output():
    """``documented_output(page, snippet)``: the ``text`` block a page shows right after including
    ``snippet`` -- the output it promises."""
    return _documented_output


@pytest.fixture(scope="session")
def search_hook():
    """``docs/hooks/search_check.py``, the mkdocs hook that checks the built search index."""
    return load_hook("search_check")


@pytest.fixture(scope="session")
def sphinx_roles_hook():
    """``docs/hooks/griffe_sphinx_roles.py``, the Griffe extension that rewrites Sphinx roles."""
    return load_hook("griffe_sphinx_roles")
