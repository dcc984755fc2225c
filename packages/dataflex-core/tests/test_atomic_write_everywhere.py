"""One writer for every file DataFlex writes (issue 58, F5, item 3): the ledger export refuses what the CLI's
writer refuses, in one line naming the path, and leaves a device or a FIFO as it was."""

import os
import stat

import pytest

from dataflex_core.atomic_write import UnwritableTargetError
from dataflex_core.ledger import PromptIds, PromptLedger


def _ledger() -> PromptLedger:
    return PromptLedger(PromptIds([10, 11, 12], "index"))


def test_the_ledger_export_leaves_a_fifo_a_fifo(tmp_path):
    fifo = tmp_path / "ledger.parquet"
    os.mkfifo(fifo)
    with pytest.raises(UnwritableTargetError, match="is a FIFO; DataFlex writes only regular files"):
        _ledger().export(fifo)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(os.listdir(tmp_path)) == ["ledger.parquet"]  # no temporary file left beside it


@pytest.mark.parametrize(
    ("target", "expected"),
    [("dir", "is a directory"), ("missing/ledger.parquet", "does not exist; create the folder first")],
    ids=["directory", "missing-folder"],
)
def test_the_ledger_export_names_a_path_that_cannot_take_a_file_in_one_line(tmp_path, target, expected):
    (tmp_path / "dir").mkdir()
    with pytest.raises(UnwritableTargetError, match=expected) as info:
        _ledger().export(tmp_path / target)
    assert "\n" not in str(info.value)


def test_the_ledger_export_is_atomic_and_regular(tmp_path):
    path = tmp_path / "ledger.parquet"
    path.write_text("old")
    _ledger().export(path)
    assert path.read_bytes()[:4] == b"PAR1" and sorted(os.listdir(tmp_path)) == ["ledger.parquet"]


def test_a_failed_streaming_write_keeps_the_old_file(tmp_path):
    from dataflex_core.atomic_write import atomic_output

    path = tmp_path / "out.bin"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_output(path) as temp:
        temp.write_text("half")
        raise RuntimeError("the writer failed")
    assert path.read_text() == "old" and sorted(os.listdir(tmp_path)) == ["out.bin"]
