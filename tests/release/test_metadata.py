"""Every distribution is ready to release: license, URLs, build requirements, version and changelog.

These read the ``pyproject.toml`` files only (no build), so they are quick; the
built artefacts are checked by ``test_wheelhouse.py``.
"""

from __future__ import annotations

import re

import pytest
from monorepo_dists import ROOT, TEMPLATES, Dist, all_dists

DISTS = all_dists(with_template=True)
RELEASED = [d for d in DISTS if d.path not in TEMPLATES]


def mkdocs_repo_url() -> str:
    match = re.search(r"^repo_url:\s*(\S+)\s*$", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), re.M)
    assert match, "mkdocs.yml has no repo_url: the site would not link the repository"
    return match.group(1).rstrip("/")


@pytest.mark.parametrize("dist", DISTS, ids=lambda d: d.name)
def test_license_is_an_spdx_expression_with_the_license_file(dist: Dist):
    project = dist.pyproject["project"]
    assert project.get("license") == "Apache-2.0", (
        f"{dist.rel}/pyproject.toml: license = {project.get('license')!r}; expected the SPDX string "
        '"Apache-2.0" (a {text = ...} table is deprecated and warns on every install)'
    )
    assert project.get("license-files") == ["LICENSE"], f"{dist.rel}: license-files should be ['LICENSE']"
    license_file = dist.path / "LICENSE"
    assert license_file.is_file(), f"{dist.rel}/LICENSE is missing (a link to the repository's LICENSE will do)"
    assert license_file.read_bytes() == (ROOT / "LICENSE").read_bytes(), f"{dist.rel}/LICENSE differs from ./LICENSE"


@pytest.mark.parametrize("dist", DISTS, ids=lambda d: d.name)
def test_build_backend_understands_license_expressions(dist: Dist):
    requires = dist.pyproject["build-system"]["requires"]
    setuptools = [r for r in requires if re.match(r"setuptools\b", r)]
    assert setuptools, f"{dist.rel}: build-system.requires names no setuptools: {requires}"
    floor = re.search(r">=\s*(\d+)", setuptools[0])
    assert floor and int(floor.group(1)) >= 77, (
        f"{dist.rel}: {setuptools[0]!r}; license expressions (PEP 639) need setuptools>=77"
    )


@pytest.mark.parametrize("dist", DISTS, ids=lambda d: d.name)
def test_project_urls_name_the_repository_the_docs_and_its_own_changelog(dist: Dist):
    urls = dist.pyproject["project"].get("urls", {})
    assert set(urls) >= {"Repository", "Documentation", "Changelog"}, f"{dist.rel}: project.urls = {urls}"
    repo = mkdocs_repo_url()
    assert urls["Repository"].rstrip("/") == repo, f"{dist.rel}: Repository {urls['Repository']!r} != site's {repo!r}"
    assert urls["Changelog"] == f"{repo}/blob/main/{dist.rel}/CHANGELOG.md"
    assert urls["Documentation"].startswith("https://")


@pytest.mark.parametrize("dist", DISTS, ids=lambda d: d.name)
def test_the_changelog_has_a_section_for_the_current_version(dist: Dist):
    path = dist.path / "CHANGELOG.md"
    assert path.is_file(), (
        f"{dist.rel} has no CHANGELOG.md (every distribution keeps one; its Changelog URL points there)"
    )
    changelog = path.read_text(encoding="utf-8")
    assert re.search(rf"^## {re.escape(dist.version)}\b", changelog, re.M), (
        f"{dist.rel}: version {dist.version} has no '## {dist.version} - YYYY-MM-DD' section in CHANGELOG.md; "
        "bump the version and the changelog together"
    )


@pytest.mark.parametrize("dist", [d for d in DISTS if d.name != "dataflex-core"], ids=lambda d: d.name)
def test_the_core_is_required_with_a_floor_never_pinned(dist: Dist):
    core = [r for r in dist.pyproject["project"]["dependencies"] if re.match(r"dataflex-core\b", r)]
    assert core, f"{dist.rel} does not depend on dataflex-core"
    assert "==" not in core[0] and ">=" in core[0], f"{dist.rel}: {core[0]!r}; use a floor such as >=0.1,<1"


def test_release_tags_are_unique_per_distribution():
    tags = [d.tag for d in RELEASED]
    assert len(set(tags)) == len(tags)
    assert "dataflex-core-v" + next(d.version for d in RELEASED if d.name == "dataflex-core") in tags
    names = {d.name for d in RELEASED}
    assert len(names) == len(RELEASED), "two folders build a distribution of the same name"
