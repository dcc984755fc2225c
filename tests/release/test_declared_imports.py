"""Every distribution declares what it imports: a wheel that imports a module only transitively installed breaks
on the day an upstream drops that dependency.

Each distribution's shipped sources (``src/``, function-local imports included, read with ``ast``) may import the
standard library, its own packages, and what its ``dependencies`` or extras declare. An import that a
``try: ... except ImportError`` guards is optional and allowed; one under ``if TYPE_CHECKING:`` never runs.
"""

from __future__ import annotations

import ast
import re
import sys
from importlib.metadata import packages_distributions

import pytest
from monorepo_dists import Dist, all_dists

DISTS = all_dists(with_template=True)
#: import name -> distributions providing it, in this environment (what is not installed maps by its name).
PROVIDERS = packages_distributions()
#: Import names whose distribution is not spelled like them and may be absent here (so not in PROVIDERS).
KNOWN = {
    "yaml": ["PyYAML"],
    "hydra": ["hydra-core"],
    "google": ["protobuf"],
    "tomli_w": ["tomli-w"],
    "transfer_queue": ["TransferQueue"],
}


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared(dist: Dist) -> dict[str, str]:
    """Normalised distribution name -> where it is declared (``dependencies`` or ``extra <name>``)."""
    project = dist.pyproject["project"]
    found = {}
    for where, requirements in [
        ("dependencies", project.get("dependencies", [])),
        *((f"extra {extra}", reqs) for extra, reqs in project.get("optional-dependencies", {}).items()),
    ]:
        for requirement in requirements:
            found.setdefault(normalise(re.match(r"[A-Za-z0-9_.-]+", requirement).group(0)), where)
    return found


def _guards_import_error(node: ast.Try) -> bool:
    names = set()
    for handler in node.handlers:
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        names |= {k.id for k in kinds if isinstance(k, ast.Name)}
    return bool(names & {"ImportError", "ModuleNotFoundError"})


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def required_imports(tree: ast.AST) -> set[str]:
    """Top-level names of the absolute imports that run unguarded, at module level or inside functions."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Try) and _guards_import_error(node):
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child)
            return
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def undeclared(dist: Dist) -> dict[str, list[str]]:
    """Import name -> the source files importing it, for each import the distribution does not declare."""
    src = dist.path / "src"
    own = {p.name for p in src.iterdir() if p.is_dir() and not p.name.endswith(".egg-info")} | {
        p.stem for p in src.glob("*.py")
    }
    allowed = set(sys.stdlib_module_names) | own | {"__future__"}
    deps = declared(dist)
    missing: dict[str, list[str]] = {}
    for path in sorted(src.rglob("*.py")):
        for name in sorted(required_imports(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))):
            providers = PROVIDERS.get(name) or KNOWN.get(name) or [name]
            if name in allowed or any(normalise(p) in deps for p in providers):
                continue
            missing.setdefault(name, []).append(path.relative_to(dist.path).as_posix())
    return missing


@pytest.mark.parametrize("dist", DISTS, ids=lambda d: d.name)
def test_every_import_is_declared(dist: Dist):
    missing = undeclared(dist)
    assert not missing, (
        f"{dist.rel} imports what its pyproject does not declare: "
        + "; ".join(f"{name} (in {', '.join(files[:3])})" for name, files in missing.items())
        + " -- add each distribution to [project] dependencies (or an extra, if only that extra's modules import it)"
    )


def test_the_scan_sees_function_local_imports_and_skips_guarded_ones():
    tree = ast.parse(
        "import os\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import typed_only\n"
        "try:\n    import optional_one\nexcept ImportError:\n    optional_one = None\n"
        "def f():\n    from local_one.sub import x\n    import local_two as y\n"
        "from . import sibling\n"
    )
    assert required_imports(tree) == {"os", "typing", "local_one", "local_two"}
