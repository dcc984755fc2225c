"""Write a file so that a reader sees the old content or the new, never half of it."""

from __future__ import annotations

import os
from pathlib import Path


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to a temporary file beside ``path``, flush it to disk, then rename it over ``path``.

    A crash leaves either the old file or the new one; the temporary file (a dot-name
    no framework looks for) is removed on any error.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """:func:`write_bytes_atomic` of ``text`` as UTF-8."""
    return write_bytes_atomic(path, text.encode("utf-8"))
