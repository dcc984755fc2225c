"""``--with PATH``: the nox sessions that rebuild their virtualenv each run (``demo``, ``demo-trl``, ``dataflex``)
install a plugin package from outside ``plugins/`` too, so an author runs their own plugin in both demos."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "plugins" / "_template"  # not among the shipped plugins the sessions install
pytest.importorskip("nox")


def test_with_is_taken_out_of_the_commands_arguments(noxfile):
    paths, rest = noxfile.take_plugins(["--with", "plugins/_template", "--steps", "3", f"--with={TEMPLATE}"])
    assert paths == [TEMPLATE, TEMPLATE] and rest == ["--steps", "3"]
    assert noxfile.take_plugins(["--steps", "3"]) == ([], ["--steps", "3"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--with"], "--with needs a plugin package's folder, got ''"),
        (["--with", "--steps", "3"], "--with needs a plugin package's folder, got '--steps'"),
        (["--with", "no-such-plugin"], "--with 'no-such-plugin': "),
    ],
)
def test_a_bad_with_names_the_value_and_the_fix(noxfile, args, message):
    with pytest.raises(ValueError) as info:
        noxfile.take_plugins(args)
    assert message in str(info.value), info.value
    assert "--with ../dataflex-my-plugin" in str(info.value) or "new_plugin.sh" in str(info.value)


def test_the_dataflex_session_installs_and_lists_a_plugin_given_with_with(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NOX_CURRENT_SESSION", "VIRTUAL_ENV")}
    command = [sys.executable, "-m", "nox", "--envdir", str(tmp_path / "nox"), "-s", "dataflex", "--"]
    proc = subprocess.run([*command, "--with", "plugins/_template", "plugins"], cwd=ROOT, env=env,
                          capture_output=True, text=True)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "installing a CPU torch" in out  # the install says what it does before its quiet minutes
    rows = {line.split()[1]: line for line in proc.stdout.splitlines() if line.split()[2:3] and "." in line}
    assert "dataflex-example" in rows and "loaded" in rows["dataflex-example"], proc.stdout
    assert "dataflex-scorers-advantage" in rows  # beside the shipped plugins, not instead of them


def test_conformance_names_both_ways_to_certify_a_plugin_outside_the_checkout(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NOX_CURRENT_SESSION", "VIRTUAL_ENV")}
    command = [sys.executable, "-m", "nox", "--envdir", str(tmp_path / "nox"), "-s", "conformance", "--"]
    proc = subprocess.run([*command, "dataflex-my-plugin"], cwd=ROOT, env=env, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "unknown plugin 'dataflex-my-plugin'" in out
    assert "nox -s conformance -- ../dataflex-my-plugin" in out and f"DATAFLEX_FROM={ROOT} nox -s conformance" in out


# -- install messages (issue 40.7) ---------------------------------------------------------------------------------


def session_like(noxfile, *, no_install: bool, reused: bool, said: list[str], backend: str = "virtualenv"):
    """The two facts nox's own ``session.install`` reads to skip an install, the installer, and the session's log."""
    from types import SimpleNamespace

    venv = SimpleNamespace(_reused=reused, location=str(ROOT / ".nox" / "demo"))
    runner = SimpleNamespace(global_config=SimpleNamespace(no_install=no_install), venv=venv)
    return SimpleNamespace(_runner=runner, virtualenv=venv, name="demo", log=said.append, venv_backend=backend)


@pytest.mark.parametrize(
    ("no_install", "reused", "installs"), [(True, True, False), (True, False, True), (False, True, True)]
)
def test_the_install_message_says_reusing_when_nox_installs_nothing(noxfile, no_install, reused, installs):
    said: list[str] = []
    noxfile.announce_install(session_like(noxfile, no_install=no_install, reused=reused, said=said), "torch", 3)
    (message,) = said
    assert message.startswith("installing torch into .nox/demo (about 3 min") == installs, message
    assert message.startswith("reusing .nox/demo (nox -R: nothing installed") == (not installs), message


def test_every_user_session_announces_its_install_before_it_starts(noxfile):
    """``nox -s evidence`` installed for minutes without a word."""
    import ast

    tree = ast.parse((ROOT / "noxfile.py").read_text())
    for name in ("demo", "demo_trl", "dataflex_cli", "evidence", "evidence_verl"):
        func = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == name)
        calls = [
            node.func.id for node in ast.walk(func) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        ]
        assert "announce_install" in calls, f"nox session {name} installs without announcing it"
        assert calls.index("announce_install") < calls.index("install_torch"), name


def test_the_install_message_gives_uvs_minute_where_uv_installs(noxfile):
    said: list[str] = []
    noxfile.announce_install(session_like(noxfile, no_install=False, reused=False, said=said, backend="uv"), "x", 3)
    assert said[0].startswith("installing x into .nox/demo (about 1 min"), said
