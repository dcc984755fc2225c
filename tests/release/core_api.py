"""What a dependent uses of ``dataflex_core``, and what a released core offered (read with ``ast``, nothing imported).

A dependent's ``dataflex-core>=X.Y`` floor is a promise that it works with
core X.Y.0. ``core_api/<version>.txt`` records what that release offered: one
line per public module (``dataflex_core.step``) and per top-level name
(``dataflex_core.session:DataFlexSession``). ``test_core_floors.py`` checks every
dependent's imports against the snapshot of its floor.

Record a snapshot when the core is released (``RELEASING.md``)::

    python tests/release/core_api.py packages/dataflex-core/src > tests/release/core_api/<version>.txt
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

CORE = "dataflex_core"


def _module_name(src: Path, path: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _top_level_names(tree: ast.Module) -> set[str]:
    """Names a module binds at top level: definitions, assignments and re-exports of the core's own names.

    ``from module import name`` works for any of them, whatever ``__all__`` lists.
    """
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").split(".")[0] == CORE):
            # a re-export of the core's own names; imports of other libraries are not its API
            names.update(a.asname or a.name for a in node.names if a.name != "*")
    return names


def _is_public(name: str) -> bool:
    return not name.startswith("_") or (name.startswith("__") and name.endswith("__") and name != "__all__")


def public_api(src: Path) -> set[str]:
    """Every public module of the core package under ``src`` and every name it binds at top level."""
    api: set[str] = set()
    for path in sorted((src / CORE).rglob("*.py")):
        module = _module_name(src, path)
        if any(part.startswith("_") for part in module.split(".")[1:]):
            continue
        api.add(module)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        api.update(f"{module}:{name}" for name in _top_level_names(tree) if _is_public(name))
    return api


def _attribute_chain(node: ast.AST) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


def uses_of_core(src: Path) -> dict[str, list[str]]:
    """The dotted paths into the core the Python files under ``src`` use, each with the files that use it.

    ``from dataflex_core.x import y`` uses ``dataflex_core.x.y``; ``import
    dataflex_core.x`` uses ``dataflex_core.x``; an attribute read off an imported
    core module or name (``dataflex_core.session.DataFlexSession``) uses its whole path.
    """
    uses: dict[str, list[str]] = {}

    def use(dotted: str, path: Path) -> None:
        files = uses.setdefault(dotted, [])
        rel = path.relative_to(src).as_posix()
        if rel not in files:
            files.append(rel)

    for path in sorted(src.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        bound: dict[str, str] = {}  # local name -> the core path it is bound to
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.level == 0
                and node.module
                and node.module.split(".")[0] == CORE
            ):
                for alias in node.names:
                    use(f"{node.module}.{alias.name}", path)
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == CORE:
                        use(alias.name, path)
                        bound[alias.asname or CORE] = alias.name if alias.asname else CORE
        for node in ast.walk(tree):
            chain = _attribute_chain(node) if isinstance(node, ast.Attribute) else None
            if chain and chain[0] in bound:
                use(".".join([bound[chain[0]], *chain[1:]]), path)
    return uses


def offers(api: set[str], dotted: str) -> bool:
    """Whether ``api`` offers ``dotted``: its longest module prefix, then one name bound there (the rest are
    attributes of that object, which a snapshot does not record)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module in api:
            return cut == len(parts) or f"{module}:{parts[cut]}" in api
    return False


def missing_from(api: set[str], uses: dict[str, list[str]]) -> dict[str, list[str]]:
    """The uses ``api`` does not offer, each with the files that use it."""
    return {dotted: files for dotted, files in sorted(uses.items()) if not offers(api, dotted)}


if __name__ == "__main__":
    print("\n".join(sorted(public_api(Path(sys.argv[1])))))
