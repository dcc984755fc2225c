"""A lock file is input (issue 58, F6): names, versions and hashes checked field by field before a pip line."""

import pytest

from dataflex_core.cli import main as cli_main
from dataflex_core.lock import LockFileError, parse_lock

HEX = "ab" * 32


def _lock(name="disc-p", version="0.1.0", digest=HEX, core="0.3.0", mechanism="disc_mech"):
    """A lock of one distribution shipping a mechanism and a component of a kind its own base declares."""
    return (
        f'lock_version = 1\n[core]\nversion = "{core}"\n'
        f'[plugins."{name}"]\nversion = "{version}"\n'
        f'[plugins."{name}".components]\nmechanism = ["{mechanism}"]\ndisc_grader = ["disc_halves"]\n'
        f'[plugins."{name}".files]\n"disc_p/__init__.py" = "{digest}"\n'
    )


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (_lock(version="0.1.0\\n--index-url https://evil.example/simple"), "version"),
        (_lock(version="0.1.0 --pre"), "version"),
        (_lock(core="0.3.0\\n--extra-index-url https://evil.example"), "core.version"),
        (_lock(name="disc-p\\n--index-url https://evil.example"), "plugins key"),
        (_lock(name="-e .", version="1"), "plugins key"),
        (_lock(digest="not hex"), "files"),
        (_lock(mechanism="disc_mech\\n\\u001b[31mforged"), "components.mechanism"),
    ],
    ids=["version-newline", "version-option", "core-version", "name-newline", "name-option", "hash", "component-name"],
)
def test_a_lock_field_that_is_not_what_dataflex_writes_is_refused_naming_file_field_and_value(
    tmp_path, capsys, text, field
):
    path = tmp_path / "hostile.lock"
    path.write_text(text)
    with pytest.raises(LockFileError, match=field):
        parse_lock(text, source=str(path))
    out_file = tmp_path / "requirements.txt"
    assert cli_main(["lock", "--requirements", "--from", str(path), "-o", str(out_file)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and field in err
    assert not out_file.exists()


def test_a_well_formed_lock_gives_one_pin_per_distribution(tmp_path, capsys):
    path = tmp_path / "ok.lock"
    path.write_text(_lock())
    assert cli_main(["lock", "--requirements", "--from", str(path)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("#")]
    assert lines == ["dataflex-core==0.3.0", "disc-p==0.1.0"]
    assert parse_lock(_lock()).plugins["disc-p"].components == {
        "mechanism": ("disc_mech",),
        "disc_grader": ("disc_halves",),
    }
