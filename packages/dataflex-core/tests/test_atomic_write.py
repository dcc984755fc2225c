"""The atomic writer makes regular files only, and every CLI path error is one line with exit 2.

The writer serves locks, checkpoints and ledger exports: a rename over a device
node, a FIFO or a link to one would replace that node with a plain file (as root,
``-o /dev/full`` removed the system's device). Issue 39, items 12 and 13.
"""

from __future__ import annotations

import os
import stat

import pytest

from dataflex_core.atomic_write import UnwritableTargetError, write_bytes_atomic, write_text_atomic
from dataflex_core.cli import EXIT_LOCK_ERROR
from dataflex_core.cli import main as cli_main
from dataflex_core.lock import LockFileError, parse_lock, read_lock


def test_a_regular_file_is_replaced_whole_and_no_temporary_file_is_left(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("old")
    write_text_atomic(path, "new")
    assert path.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_a_link_to_a_regular_file_writes_that_file_and_keeps_the_link(tmp_path):
    real = tmp_path / "real.lock"
    real.write_text("old")
    link = tmp_path / "link.lock"
    link.symlink_to(real)
    write_text_atomic(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def _fifo(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (lambda tmp: tmp / "folder", "a directory"),
        (_fifo, "a FIFO"),
        (lambda tmp: tmp / "to-null", "a device"),
        (lambda tmp: tmp / "dangling", "does not exist"),
        (lambda tmp: tmp / "missing" / "x.lock", "does not exist"),
    ],
    ids=["directory", "fifo", "link-to-device", "dangling-link", "missing-folder"],
)
def test_a_target_that_cannot_be_a_regular_file_is_refused_naming_it_and_left_as_it_was(tmp_path, make, kind):
    (tmp_path / "folder").mkdir()
    (tmp_path / "to-null").symlink_to(os.devnull)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    target = make(tmp_path)
    before = os.lstat(target).st_mode if os.path.lexists(target) else None
    with pytest.raises(UnwritableTargetError) as caught:
        write_bytes_atomic(target, b"data")
    message = str(caught.value)
    assert str(target) in message and kind in message and "\n" not in message
    assert isinstance(caught.value, OSError)  # callers that handle a failed write handle this one
    assert (os.lstat(target).st_mode if os.path.lexists(target) else None) == before
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


# -- the CLI's path errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "output",
    ["{tmp}", "{tmp}/missing/x.lock", "{tmp}/to-null", "{tmp}/pipe"],
    ids=["directory", "missing-folder", "link-to-device", "fifo"],
)
@pytest.mark.parametrize("requirements", [False, True], ids=["lock", "requirements"])
def test_lock_to_a_path_that_cannot_take_a_file_is_one_line_and_exit_2(tmp_path, capsys, output, requirements):
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "to-null").symlink_to(os.devnull)  # never the device itself: a writer that replaces it breaks the host
    output = output.format(tmp=tmp_path)
    argv = ["lock", "-o", output] + (["--requirements"] if requirements else [])
    assert cli_main(argv) == EXIT_LOCK_ERROR
    err = capsys.readouterr().err.strip()
    assert err.startswith("dataflex lock: ") and output in err and "\n" not in err and "Traceback" not in err


def test_lock_on_a_full_disk_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    target = tmp_path / "x.lock"
    assert cli_main(["lock", "-o", str(target)]) == EXIT_LOCK_ERROR
    err = capsys.readouterr().err.strip()
    assert err == f"dataflex lock: cannot write {str(target)!r}: No space left on device"
    assert not target.exists() and not list(tmp_path.iterdir())


# -- a lock nested too deeply ----------------------------------------------------------------------------------

DEEP_LOCKS = {
    "inline-tables": "lock_version = 1\na = " + "{b = " * 5000 + "1" + "}" * 5000 + "\n",
    "arrays": "lock_version = 1\na = " + "[" * 5000 + "]" * 5000 + "\n",
}


@pytest.mark.parametrize("text", list(DEEP_LOCKS.values()), ids=list(DEEP_LOCKS))
def test_a_deeply_nested_lock_is_the_documented_one_line_error(tmp_path, capsys, text):
    path = tmp_path / "deep.lock"
    path.write_text(text)
    with pytest.raises(LockFileError, match="nests its tables or arrays too deeply"):
        parse_lock(text, str(path))
    with pytest.raises(LockFileError, match="regenerate it with `dataflex lock`"):
        read_lock(path)
    assert cli_main(["verify", str(path)]) == EXIT_LOCK_ERROR
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"dataflex verify: {path} nests") and "\n" not in err
