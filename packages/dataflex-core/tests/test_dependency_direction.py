"""Core and plugins stay framework-agnostic: they never import a training framework or a model library.

The core imports nothing but the standard library and the requirements it
declares (torch, pluggy, numpy, the TOML and version parsers), as its
docstring says; the demos, ``dataflex compare`` and the testing kit that need
more live in ``dataflex-lab``.
"""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

#: Why each import is forbidden in core, plugins and conformance; extend a group, or add one, as hosts arrive.
FORBIDDEN_BY_HOST = {
    "verl and its data plane": {"verl", "ray", "transfer_queue", "transferqueue"},
    "TRL and the stack under it": {"trl", "transformers", "tokenizers", "accelerate"},
}
FORBIDDEN = set().union(*FORBIDDEN_BY_HOST.values())
REPO = Path(__file__).resolve().parents[3]
CORE = REPO / "packages" / "dataflex-core"
#: Import names of requirements whose distribution name differs.
IMPORT_NAMES = {"tomli-w": "tomli_w"}
#: Imported when installed, never required: a host's OmegaConf config is read as plain dicts.
OPTIONAL = {"omegaconf"}


def _agnostic_sources():
    roots = [REPO / "packages" / "dataflex-core" / "src"]
    roots += sorted(p / "src" for p in (REPO / "plugins").glob("*") if (p / "src").is_dir())
    roots += [REPO / "conformance" / "src"]
    return [f for root in roots if root.is_dir() for f in root.rglob("*.py")]


def _imported_top_levels(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0]


def test_no_agnostic_source_file_imports_a_framework():
    sources = _agnostic_sources()
    assert sources, f"no sources found under {REPO}"
    offenders = {str(f.relative_to(REPO)): sorted(set(_imported_top_levels(f)) & FORBIDDEN) for f in sources}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_loading_every_installed_plugin_imports_no_framework():
    code = (
        "import sys, dataflex_core\n"
        "dataflex_core.get_registry()\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {sorted(FORBIDDEN)!r}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("module", ["dataflex_core"])
def test_core_imports_without_omegaconf(module):
    code = f"import sys; sys.modules['omegaconf'] = None; import {module}; print('ok')"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "ok"


def _declared_imports() -> set[str]:
    requirements = tomllib.loads((CORE / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() for r in requirements}
    return {IMPORT_NAMES.get(name, name.replace("-", "_")) for name in names}


def test_the_core_imports_only_the_standard_library_and_what_it_declares():
    allowed = set(sys.stdlib_module_names) | _declared_imports() | OPTIONAL | {"dataflex_core", "__future__"}
    sources = sorted((CORE / "src").rglob("*.py"))
    offenders = {str(f.relative_to(REPO)): sorted(set(_imported_top_levels(f)) - allowed) for f in sources}
    assert {k: v for k, v in offenders.items() if v} == {}, (
        "dataflex-core imports something it does not declare; a demo, a comparison or a test helper belongs "
        "in dataflex-lab"
    )
