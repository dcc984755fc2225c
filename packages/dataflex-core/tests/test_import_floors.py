"""The core's floors, read from its imports: vocabulary -> step primitives -> mechanisms -> runner -> session.

The graph is built with ``ast`` from every import statement of ``dataflex_core``: at module level, inside
functions and under ``if TYPE_CHECKING:`` alike, so an import moved into a function (or behind
``TYPE_CHECKING``) to break a circle still counts as the circle it would be. Importing ``pkg.mod`` runs
``pkg/__init__.py`` first, so an import that reaches into another package also depends on that package's
face; a face that hands on names from above its package therefore shows up as a circle too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "dataflex_core"

#: The floors, from the ground up: a module of a floor imports only from its own floor and those below.
FLOORS = {
    "step": 1,
    "mechanisms": 2,
    "runner": 3,
    "session": 4,
}
#: Modules above every floor: the package's face and its console script.
TOP = {"dataflex_core", "dataflex_core.cli", "dataflex_core.cli_extensions"}


def module_files(src: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``package`` under ``src``."""
    out = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _absolute(module: str, is_package: bool, level: int, name: str | None) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def _faces(target: str, importer: str, modules: dict[str, Path]) -> list[str]:
    """The package faces Python runs to import ``target`` from ``importer``: every package above ``target`` that
    does not also hold ``importer`` (a package's own modules are imported by its face, not the other way)."""
    parts = target.split(".")
    faces = []
    for cut in range(2, len(parts)):
        package = ".".join(parts[:cut])
        if package in modules and not (importer == package or importer.startswith(package + ".")):
            faces.append(package)
    return faces


def import_graph(src: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports, anywhere in its file (functions and TYPE_CHECKING too)."""
    modules = module_files(src, package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or "" if node.level == 0 else _absolute(module, is_package, node.level, node.module)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in modules else base)
            for target in targets:
                if target.split(".")[0] != package or target not in modules or target == package:
                    continue
                graph[module].update({target, *_faces(target, module, modules)} - {module})
    return graph


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of ``graph`` as the modules along it (first == last), or ``None``."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def floor(module: str) -> int:
    """0 for the vocabulary, then the floors of :data:`FLOORS`; the face and the CLI stand above them all."""
    if module in TOP:
        return max(FLOORS.values()) + 1
    parts = module.split(".")
    return FLOORS.get(parts[1], 0) if len(parts) > 1 else 0


def test_the_core_has_no_import_circle():
    circle = find_circle(import_graph(SRC, PACKAGE))
    assert circle is None, "import circle in dataflex_core (every import statement counts): " + " -> ".join(circle)


def test_each_floor_imports_only_from_its_own_floor_and_below():
    graph = import_graph(SRC, PACKAGE)
    upward = sorted(
        f"{module} (floor {floor(module)}) imports {target} (floor {floor(target)})"
        for module, targets in graph.items()
        for target in targets
        if floor(target) > floor(module)
    )
    assert not upward, "imports that run up a floor:\n" + "\n".join(upward)


def test_no_import_hides_behind_type_checking():
    hidden = []
    for module, path in module_files(SRC, PACKAGE).items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                hidden.append(f"{module}:{node.lineno}")
    assert not hidden, f"TYPE_CHECKING imports in dataflex_core: {hidden}; import what the module uses"


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


@pytest.mark.parametrize(
    "files",
    [
        # a circle held up by an import inside a function
        {
            "toy/__init__.py": "",
            "toy/a.py": "from .b import B\nA = 1\n",
            "toy/b.py": "def f():\n    from .a import A\n",
        },
        # ... and by TYPE_CHECKING
        {
            "toy/__init__.py": "",
            "toy/a.py": "from .b import B\nA = 1\n",
            "toy/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\nB = 1\n",
        },
        # a package face that hands on a name from a module built on that package
        {
            "toy/__init__.py": "",
            "toy/low/__init__.py": "from ..high import H\n",
            "toy/low/x.py": "X = 1\n",
            "toy/high.py": "from .low.x import X\nH = 1\n",
        },
    ],
    ids=["function-local", "type-checking", "package-face"],
)
def test_a_hidden_circle_is_found(tmp_path, files):
    graph = import_graph(_write(tmp_path, files), "toy")
    assert find_circle(graph) is not None, graph


def test_a_package_importing_its_own_modules_from_its_face_is_no_circle(tmp_path):
    files = {
        "toy/__init__.py": "",
        "toy/p/__init__.py": "from .a import A\n",
        "toy/p/a.py": "from .b import B\nA = 1\n",
    }
    files["toy/p/b.py"] = "B = 1\n"
    assert find_circle(import_graph(_write(tmp_path, files), "toy")) is None
