"""Write a file so that a reader sees the old content or the new, never half of it.

Only regular files: a rename over a device node or a FIFO (``-o /dev/full``) would replace the node, so such a target, a
directory, a missing folder or a dangling link is refused naming the path; a link to a regular file is followed.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from .errors import DataFlexError


class UnwritableTargetError(DataFlexError, OSError):
    """The path cannot take a regular file: a directory, a device, a FIFO, a missing folder, a dangling link.

    An ``OSError`` too, so callers that handle a failed write (a full or read-only disk) handle this one.
    """


def file_kind(mode: int) -> str:
    """What a file of ``os.stat`` mode ``mode`` is, for messages: ``a directory``, ``a FIFO``, ..."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def regular_target(path: str | os.PathLike[str]) -> Path:
    """The file a write to ``path`` replaces: ``path``, or the regular file its link names; else refused."""
    given = Path(path)
    target = given
    if given.is_symlink():
        target = Path(os.path.realpath(given))
        if not target.exists():
            raise UnwritableTargetError(
                f"{str(given)!r} is a link to {str(target)!r}, which does not exist; "
                "write to a regular file's path instead"
            )
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise UnwritableTargetError(f"cannot write {str(given)!r}: {exc.strerror or exc}") from None
    if mode is not None and not stat.S_ISREG(mode):
        via = "" if target == given else f" (a link to {str(target)!r})"
        raise UnwritableTargetError(
            f"{str(given)!r}{via} is {file_kind(mode)}; DataFlex writes only regular files: name a file path"
        )
    folder = target.parent
    if not folder.is_dir():
        what = "does not exist" if not folder.exists() else "is not a directory"
        raise UnwritableTargetError(
            f"cannot write {str(given)!r}: its folder {str(folder)!r} {what}; create the folder first"
        )
    return target


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[Path]:
    """The one writer of DataFlex's files: yields a temporary path beside ``path`` to write, then renames it over
    ``path``, after :func:`regular_target` refused what cannot take a regular file.

    For a writer that streams (Parquet); :func:`write_bytes_atomic` for bytes in memory. The temporary goes on error.
    """
    target = regular_target(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` through :func:`atomic_output`, flushed to disk before the rename; returns ``path``."""
    with atomic_output(path) as tmp, open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    return Path(path)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """:func:`write_bytes_atomic` of ``text`` as UTF-8."""
    return write_bytes_atomic(path, text.encode("utf-8"))
