"""What a hostile plugin or checkpoint does, for the tests that check a lock or a resume never runs it.

:data:`HOSTILE` is code that leaves a mark (the ``marker`` fixture of the
testing kit's pytest plugin says where), :class:`RunsCode` a pickle that runs
code when loaded by anything but a data-only loader, and :func:`plant_bytecode`
a cached ``.pyc`` CPython would run instead of its source.
"""

from __future__ import annotations

import importlib.util
import marshal
from pathlib import Path

#: The environment variable naming the file :data:`HOSTILE` code and :class:`RunsCode` create.
MARKER_ENV = "HS_MARKER"
#: Code an attacker gets to run: it leaves the marker file ``$HS_MARKER``, so a test sees that it ran.
HOSTILE = """
import os
from pathlib import Path

Path(os.environ["HS_MARKER"]).write_text(__name__ + " ran code that is not in the lock")
BEHAVIOUR = "hostile"
"""


class RunsCode:
    """Pickles as a call of ``open(marker, "w")``: unpickled by anything but a data-only loader, it creates ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def plant_bytecode(source: Path, code: str) -> Path:
    """A ``.pyc`` for ``source`` whose header matches it (mtime and size), holding other code: CPython runs it."""
    stat = source.stat()
    header = importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little")
    header += (int(stat.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + (stat.st_size & 0xFFFFFFFF).to_bytes(
        4, "little"
    )
    cache = Path(importlib.util.cache_from_source(str(source)))
    cache.parent.mkdir(parents=True, exist_ok=True)  # under sys.pycache_prefix, the source's folders too
    cache.write_bytes(header + marshal.dumps(compile(code, str(source), "exec")))
    return cache
