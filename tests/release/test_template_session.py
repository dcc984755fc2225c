"""The template's own ``noxfile.py`` certifies it before anything is published.

A plugin author copies ``plugins/_template`` into a repository of their own and
runs ``nox -s conformance`` there. No DataFlex distribution is on an index yet,
so ``DATAFLEX_FROM`` points the session at a DataFlex checkout instead; these
tests run that session on a copy of the template outside this repository.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from monorepo_dists import ROOT, TEMPLATE

pytest.importorskip("nox")


@pytest.fixture
def author_repo(tmp_path) -> Path:
    """The template copied out of the monorepo, as an author starts."""
    repo = tmp_path / "dataflex-example"
    shutil.copytree(TEMPLATE, repo, ignore=shutil.ignore_patterns("build", "*.egg-info", "reports", "__pycache__"))
    return repo


def run_session(
    repo: Path, session: str, dataflex_from: str, tmp_path: Path, **env_extra: str
) -> subprocess.CompletedProcess:
    env = dict(os.environ, DATAFLEX_FROM=dataflex_from, **env_extra)
    env.pop("PYTHONPATH", None)
    # --device cpu: the same certificate whether or not this machine has a GPU.
    args = [sys.executable, "-m", "nox", "--envdir", str(tmp_path / "nox"), "-s", session, "--", "--device", "cpu"]
    return subprocess.run(args, cwd=repo, env=env, capture_output=True, text=True)


def test_conformance_session_certifies_the_template_from_a_checkout(author_repo, tmp_path):
    proc = run_session(author_repo, "conformance", str(ROOT), tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert f"pip install {ROOT / 'packages' / 'dataflex-core'} {ROOT / 'conformance'} ." in out
    report = json.loads((author_repo / "reports" / "conformance.json").read_text())
    assert report["ok"] and [p["name"] for p in report["packages"]] == ["dataflex-example"]
    assert {c["name"]: c["certified_devices"] for c in report["components"]} == {
        "response_length": ["cpu"],
        "centered_linear": ["cpu"],
    }
    assert "CERTIFIED:" in out


def test_a_bad_dataflex_from_is_refused_with_the_accepted_forms(author_repo, tmp_path):
    proc = run_session(author_repo, "conformance", str(tmp_path / "no-such-folder"), tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "no-such-folder" in out and "DataFlex checkout" in out and "nox -s build" in out
    assert "pip install torch" not in out, "torch was installed before the bad setting was noticed"


def test_the_default_index_without_dataflex_fails_fast_naming_the_other_sources(author_repo, tmp_path):
    # An index that has no DataFlex (as PyPI before the first release): pip with no index at all.
    empty = {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path)}
    proc = run_session(author_repo, "conformance", "index", tmp_path, **empty)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "not on your package index" in out and "DATAFLEX_FROM=../dataflex" in out
    assert "pip install torch" not in out, "torch was installed before the missing packages were noticed"
