"""Installs: uv is given the index, find-links and constraints pip is configured with (uv reads no pip.conf), and
the default test session leaves the ``full`` tests to ``tests-full``."""

from __future__ import annotations

import pytest

pytest.importorskip("nox")

#: ``pip config list`` on a machine with a site file and two PIP_ variables (the form pip prints).
LISTING = """\
:env:.find-links='/opt/wheels'
:env:.default-timeout='180'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/elsewhere'
user.index-url='https://mirror.example/simple'
"""


def test_pips_settings_reach_uv_under_uvs_names(noxfile):
    env = noxfile.pip_settings_for_uv(LISTING)
    assert env == {
        "UV_FIND_LINKS": "/opt/wheels",  # the environment variable wins over the site file, as in pip
        "UV_CONSTRAINT": "/etc/xdg/pip/constraints.txt",
        "UV_INDEX": "file:///opt/pypi/simple file:///opt/pypi-more/simple",
        "UV_DEFAULT_INDEX": "https://mirror.example/simple",
        "UV_INDEX_STRATEGY": "unsafe-best-match",  # pip compares versions across every index
    }


def test_without_pip_settings_uv_keeps_its_own_defaults(noxfile):
    assert noxfile.pip_settings_for_uv(":env:.default-timeout='180'\n") == {}
    assert noxfile.pip_settings_for_uv("") == {}


def test_several_find_links_are_comma_separated_for_uv(noxfile):
    env = noxfile.pip_settings_for_uv("global.find-links='/a /b'\n")
    assert env["UV_FIND_LINKS"] == "/a,/b"


def test_tests_leaves_the_full_variants_to_tests_full(noxfile):
    class Recorder:
        posargs: list[str] = []

        def __init__(self):
            self.runs = []

        def install(self, *args, **kwargs):
            pass

        def run(self, *args, **kwargs):
            self.runs.append(args)

    quick, full = Recorder(), Recorder()
    noxfile.run_tests(quick, "verl", full=False)
    noxfile.run_tests(full, "verl", full=True)
    assert all(run[-2:] == ("-m", "not full") for run in quick.runs) and len(quick.runs) == 3
    assert "--numprocesses" in quick.runs[0] and "--numprocesses" not in quick.runs[2]  # the fit loop: one process
    assert quick.runs[1][:2] == ("pytest", "docs/tests") and "--numprocesses" not in quick.runs[1]
    assert "docs/tests" not in quick.runs[0]
    assert not any("not full" in run for run in full.runs) and len(full.runs) == 3
    sessions = noxfile.rel(noxfile.SESSION_TESTS)
    assert sessions in full.runs[0] and sessions not in quick.runs[0]  # build runs them on every change


def test_pips_precedence_holds_between_files(noxfile):
    listing = "site.index-url='https://site/simple'\nglobal.index-url='https://global/simple'\n"
    assert noxfile.pip_settings_for_uv(listing)["UV_DEFAULT_INDEX"] == "https://site/simple"


def test_the_trl_environment_runs_its_tests_in_one_process(noxfile):
    class Recorder:
        posargs: list[str] = []
        runs: list = []

        def install(self, *args, **kwargs):
            pass

        def run(self, *args, **kwargs):
            self.runs.append(args)

    trl = Recorder()
    noxfile.run_tests(trl, "trl", full=False)
    (run,) = trl.runs
    assert "--numprocesses" not in run and run[-2:] == ("-m", "not full")


@pytest.mark.parametrize("forbidden", ["1", ""])
def test_sessions_keep_bytecode_in_one_folder_where_the_environment_forbids_it_beside_the_sources(forbidden, tmp_path):
    """Under PYTHONDONTWRITEBYTECODE each process of a session compiled torch and verl from source (21-24 CPU-s)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    env["PYTHONDONTWRITEBYTECODE"] = forbidden
    show = "import os, noxfile; print(repr(os.environ.get('PYTHONDONTWRITEBYTECODE')), os.environ.get('PYTHONPYCACHEPREFIX'))"
    out = subprocess.run(
        [sys.executable, "-c", show], cwd=root, env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == (["''", str(root / ".nox" / "pycache")] if forbidden else ["''", "None"])
