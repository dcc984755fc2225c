"""The lab's commands join ``dataflex``, ``dataflex-verl`` and ``dataflex-trl`` through ``dataflex.cli``.

The console scripts run as a user runs them; without dataflex-lab the same
commands say what to install.
"""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest

from dataflex_core import cli_extensions
from dataflex_core.cli_extensions import CLI_GROUP, EXIT_UNAVAILABLE

#: program -> (its parser factory, the commands dataflex-lab adds to it).
PROGRAMS = {
    "dataflex": ("dataflex_core.cli", ["compare", "ledger"]),
    "dataflex-verl": ("dataflex_verl.cli", ["demo", "demo-step"]),
    "dataflex-trl": ("dataflex_trl.cli", ["demo", "evidence"]),
}


def test_every_lab_command_is_an_entry_point_of_this_distribution():
    entries = {
        e.name: e.value for e in metadata.entry_points(group=CLI_GROUP) if e.dist.metadata["Name"] == "dataflex-lab"
    }
    assert set(entries) == {
        f"{program}.{command}" for program, (_, commands) in PROGRAMS.items() for command in commands
    }


@pytest.mark.parametrize("program", list(PROGRAMS))
def test_the_console_script_lists_and_documents_the_lab_commands(program):
    _, commands = PROGRAMS[program]
    listing = subprocess.run([program, "--help"], capture_output=True, text=True, check=True).stdout
    for command in commands:
        assert f"    {command} " in listing and "not installed" not in listing
        usage = subprocess.run([program, command, "--help"], capture_output=True, text=True, check=True).stdout
        assert usage.startswith(f"usage: {program} {command}")
        assert any(option in usage for option in ("--steps", "--prompts", "--baseline", "filter"))


def test_building_the_host_parsers_imports_no_framework():
    code = (
        "import sys\n"
        "from dataflex_verl.cli import build_parser as verl_parser\n"
        "from dataflex_trl.cli import build_parser as trl_parser\n"
        "verl_parser(); trl_parser()\n"
        "print(sorted(m for m in ('verl', 'trl', 'ray', 'transformers') if m in sys.modules))\n"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


@pytest.mark.parametrize(
    ("program", "command", "requirement"),
    [("dataflex", "compare", "dataflex-lab"), ("dataflex", "ledger", "dataflex-lab"),
     ("dataflex-verl", "demo", "dataflex-lab[verl]"), ("dataflex-verl", "demo-step", "dataflex-lab[verl]"), ("dataflex-trl", "demo", "dataflex-lab[trl]")],
)  # fmt: skip
def test_without_the_lab_each_command_names_what_to_install(monkeypatch, capsys, program, command, requirement):
    real = metadata.entry_points
    monkeypatch.setattr(
        cli_extensions.metadata,
        "entry_points",
        lambda **params: [e for e in real(**params) if e.dist.metadata["Name"] != "dataflex-lab"],
    )
    module = __import__(PROGRAMS[program][0], fromlist=["main"])
    assert module.main([command, "--steps", "2"]) == EXIT_UNAVAILABLE
    err = capsys.readouterr().err
    assert f"{program} {command}: this command comes with dataflex-lab, which is not installed here" in err
    assert f"pip install {requirement}" in err


def test_a_demo_without_its_framework_names_the_extra_to_install(monkeypatch, capsys):
    from dataflex_trl.cli import main

    monkeypatch.setitem(sys.modules, "trl", None)  # importing TRL now fails as where it is not installed
    assert main(["demo", "--steps", "1"]) == 2
    assert capsys.readouterr().err == "dataflex-trl demo: trl is not installed: pip install 'dataflex-lab[trl]'\n"
