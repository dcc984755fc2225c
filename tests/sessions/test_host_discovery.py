"""The tests session finds every host by its ``[tool.dataflex.host]`` table: a new host needs no edit of
noxfile.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("nox")


def test_the_monorepos_hosts_are_found_with_their_environments(noxfile):
    hosts = {path.relative_to(ROOT).as_posix(): noxfile.host_env(path) for path in noxfile.host_dirs()}
    assert hosts == {"packages/dataflex-verl": "verl", "packages/dataflex-trl": "trl", "hosts/_template": "verl"}


def test_a_host_copied_from_the_template_is_found_unedited(noxfile, tmp_path):
    for part in ("packages/dataflex-core", "packages/dataflex-verl"):
        (tmp_path / part).mkdir(parents=True)
        shutil.copy(ROOT / part / "pyproject.toml", tmp_path / part / "pyproject.toml")
    copy = tmp_path / "hosts" / "myframework"
    shutil.copytree(ROOT / "hosts" / "_template", copy, ignore=shutil.ignore_patterns("*.egg-info"))
    found = [path.relative_to(tmp_path).as_posix() for path in noxfile.host_dirs(tmp_path)]
    assert found == ["packages/dataflex-verl", "hosts/myframework"]  # core has no host table


def test_a_host_naming_an_unknown_environment_is_refused_with_the_fix(noxfile, tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.dataflex.host]\nenv = "jax"\n')
    with pytest.raises(ValueError, match=r"env = 'jax'; expected one of verl, trl"):
        noxfile.host_env(tmp_path)
