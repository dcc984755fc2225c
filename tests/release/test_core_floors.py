"""A dependent's ``dataflex-core`` floor admits only cores that have what it uses.

``pip`` resolves ``dataflex-core>=0.1,<1`` to any 0.x core; a plugin that
imports a name added in 0.2 breaks with an ImportError under a 0.1 core that
the resolver happily picked. Each dependent's imports from the core are read
with ``ast`` and checked against the snapshot of the core release its floor
names (``core_api/<version>.txt``), or against the core in this tree when the
floor is the tree's own version.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from core_api import missing_from, public_api, uses_of_core
from monorepo_dists import ROOT, Dist, all_dists

SNAPSHOTS = Path(__file__).resolve().parent / "core_api"
CORE = next(d for d in all_dists() if d.name == "dataflex-core")
DEPENDENTS = [d for d in all_dists(with_template=True) if d.name != "dataflex-core"]


def minor(version: str) -> tuple[int, int]:
    major, minor_, *_ = (int(p) for p in re.findall(r"\d+", version))
    return major, minor_


def core_floor(dist: Dist) -> str:
    requirement = next(r for r in dist.pyproject["project"]["dependencies"] if re.match(r"dataflex-core\b", r))
    match = re.search(r">=\s*([\d.]+)", requirement)
    assert match, f"{dist.rel}: {requirement!r} has no floor"
    return match.group(1)


def api_at(floor: str) -> tuple[str, set[str]]:
    """The snapshot for the core release ``floor`` names, or the tree's core when the floor is its version."""
    if minor(floor) == minor(CORE.version):
        return f"the core in this tree ({CORE.version})", public_api(CORE.path / "src")
    snapshots = sorted(p for p in SNAPSHOTS.glob("*.txt") if minor(p.stem) == minor(floor))
    assert snapshots, (
        f"no snapshot of dataflex-core {floor} under {SNAPSHOTS.relative_to(ROOT)}; record one when the core is "
        "released (RELEASING.md), or raise the floor"
    )
    oldest = min(snapshots, key=lambda p: tuple(int(x) for x in re.findall(r"\d+", p.stem)))
    return f"dataflex-core {oldest.stem}", set(oldest.read_text(encoding="utf-8").split())


@pytest.mark.parametrize("dist", DEPENDENTS, ids=lambda d: d.name)
def test_the_floor_admits_the_core_in_this_tree(dist: Dist):
    floor = core_floor(dist)
    assert minor(floor) <= minor(CORE.version), (
        f"{dist.rel} requires dataflex-core>={floor} but the core here is {CORE.version}: an install from this "
        "checkout would not resolve; bump the core's version with the floor"
    )


@pytest.mark.parametrize("dist", DEPENDENTS, ids=lambda d: d.name)
def test_everything_a_dependent_uses_is_in_the_core_its_floor_names(dist: Dist):
    floor = core_floor(dist)
    where, api = api_at(floor)
    missing = missing_from(api, uses_of_core(dist.path / "src"))
    assert not missing, (
        f"{dist.rel} requires dataflex-core>={floor}, but {where} lacks what it uses: "
        + "; ".join(f"{name} ({', '.join(files)})" for name, files in missing.items())
        + f". Raise the floor to the core release that has them (and bump {CORE.rel}'s version if it is unreleased)"
    )


def test_a_name_the_floor_lacks_is_caught(tmp_path: Path):
    """The check reads the imports a plugin really writes: a name, a submodule, an attribute of a core module."""
    package = tmp_path / "src" / "late_plugin"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "import dataflex_core\n"
        "import dataflex_core.groups as groups\n"
        "from dataflex_core import Sampler, Scorer\n"
        "from dataflex_core.runner import DataFlexStep\n"
        "mask = dataflex_core.response_token_mask\n"
        "index = groups.group_index\n"
        "length = Scorer.__name__.upper()\n",
        encoding="utf-8",
    )
    _, old = api_at("0.1.0")
    missing = missing_from(old, uses_of_core(tmp_path / "src"))
    assert set(missing) == {
        "dataflex_core.Sampler",
        "dataflex_core.runner.DataFlexStep",
        "dataflex_core.response_token_mask",
    }, missing
    assert missing["dataflex_core.Sampler"] == ["late_plugin/__init__.py"]
    assert not missing_from(public_api(CORE.path / "src"), uses_of_core(tmp_path / "src"))


def test_the_snapshots_are_what_the_tool_writes():
    for snapshot in sorted(SNAPSHOTS.glob("*.txt")):
        recorded = snapshot.read_text(encoding="utf-8").split()
        assert recorded, f"{snapshot.name} is empty"
        assert recorded == sorted(set(recorded)), f"{snapshot.name}: not the tool's sorted output"
        assert "dataflex_core" in recorded and "dataflex_core:Scorer" in recorded, f"{snapshot.name}: not a core API"
