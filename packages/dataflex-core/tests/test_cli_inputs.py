"""The CLI on hostile paths and pipes (issue 58, F7, F12, item 5): it answers at once, and its fixes work as printed."""

import os
import shlex
import subprocess
import sys
import threading

import pytest

from dataflex_core.cli import main as cli_main
from dataflex_core.lock import read_lock


def _verify_quickly(path: str, capsys) -> tuple[int, str]:
    """``dataflex verify path``, failing the test instead of hanging when it blocks."""
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("code", cli_main(["verify", path])), daemon=True)
    thread.start()
    thread.join(20)
    if thread.is_alive():
        if path.endswith("fifo"):  # release the reader so the process can end
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail(f"dataflex verify {path} did not return")
    return result["code"], capsys.readouterr().err


def test_verify_of_a_fifo_answers_at_once(tmp_path, capsys):
    fifo = tmp_path / "lock.fifo"
    os.mkfifo(fifo)
    code, err = _verify_quickly(str(fifo), capsys)
    assert code == 2 and "is a FIFO, not a regular file" in err


def test_verify_of_an_endless_device_answers_at_once(capsys):
    code, err = _verify_quickly("/dev/zero", capsys)
    assert code == 2 and "'/dev/zero' is a device, not a regular file" in err


def test_verify_of_a_directory_says_it_is_one(tmp_path, capsys):
    code, err = _verify_quickly(str(tmp_path), capsys)
    assert code == 2 and "is a directory" in err and "does not exist" not in err


def test_verify_of_standard_input_suggests_a_fix_that_writes_a_file(capsys):
    code, err = _verify_quickly("-", capsys)
    assert code == 2 and "not from standard input" in err
    assert "dataflex lock -o dataflex_plugins.lock" in err and "-o -`" not in err


def test_the_suggested_lock_command_works_as_printed_for_a_path_with_a_space(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DATAFLEX_PLUGINS", "dataflex-core")  # lock nothing but core: no plugin imported
    missing = tmp_path / "my locks" / "x.lock"
    missing.parent.mkdir()
    code, err = _verify_quickly(str(missing), capsys)
    assert code == 2 and "does not exist" in err
    command = err.split("`")[1]
    argv = shlex.split(command)
    assert argv[:3] == ["dataflex", "lock", "-o"] and argv[3] == str(missing)
    assert cli_main(argv[1:]) == 0
    read_lock(missing)


def test_a_closed_pipe_ends_the_listing_quietly():
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written (`| head` that already exited)
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from dataflex_core.cli import main; sys.exit(main())",
                "plugins",
                "--json",
            ],
            stdout=write,
            stderr=subprocess.PIPE,
            timeout=120,
            env={**os.environ, "DATAFLEX_DISABLE_PLUGIN_AUTOLOAD": "1"},
        )
    finally:
        os.close(write)
    assert b"Traceback" not in done.stderr and b"BrokenPipeError" not in done.stderr, done.stderr.decode()
