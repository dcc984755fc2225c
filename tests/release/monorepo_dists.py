"""The monorepo's distributions, read from their ``pyproject.toml`` (shared by the release tests)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
#: The template is a package to copy, not one that is released.
TEMPLATE = ROOT / "plugins" / "_template"
#: The host template: also copied, never released.
HOST_TEMPLATE = ROOT / "hosts" / "_template"
TEMPLATES = (TEMPLATE, HOST_TEMPLATE)


@dataclass(frozen=True)
class Dist:
    """One distribution of the monorepo."""

    path: Path
    name: str
    version: str
    pyproject: dict

    @property
    def rel(self) -> str:
        return self.path.relative_to(ROOT).as_posix()

    @property
    def wheel_stem(self) -> str:
        """How wheel and sdist file names spell the distribution (PEP 427 / 625)."""
        return re.sub(r"[-_.]+", "_", self.name).lower()

    @property
    def tag(self) -> str:
        """The git tag that marks a release of this distribution."""
        return f"{self.name}-v{self.version}"


def read_version(path: Path, pyproject: dict) -> str:
    """The version setuptools reads: ``version = {attr = "pkg.version.__version__"}`` in ``src/``."""
    attr = pyproject["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    module = attr.rsplit(".", 1)[0]
    source = (path / "src" / Path(*module.split("."))).with_suffix(".py").read_text(encoding="utf-8")
    match = re.search(r'^__version__\s*=\s*"([^"]+)"', source, re.M)
    assert match, f'{path}: {module} defines no __version__ = "..."'
    return match.group(1)


def all_dists(*, with_template: bool = False) -> list[Dist]:
    """Every distribution under packages/, plugins/, hosts/ and conformance/ (the templates of plugins/ and hosts/
    only if asked): a new host or plugin folder is released and checked without editing this list."""
    found = []
    for folder in ("packages", "plugins", "hosts"):
        found += [pyproject.parent for pyproject in sorted(ROOT.glob(f"{folder}/*/pyproject.toml"))]
    found.append(ROOT / "conformance")
    dists = []
    for path in found:
        if path in TEMPLATES and not with_template:
            continue
        data = tomllib.loads((path / "pyproject.toml").read_text(encoding="utf-8"))
        dists.append(Dist(path, data["project"]["name"], read_version(path, data), data))
    return dists
