"""Entry point of ``nox -s bench``: ``python benchmarks/run.py [--quick] [--json PATH]``.

On Linux the run is re-executed once with glibc's mmap threshold fixed (see
``MALLOC_ENV`` below and benchmarks/README.md): by default glibc serves
temporaries up to a dynamic threshold capped at 32 MB from reused heap memory
and larger ones from fresh, page-faulted mmaps, so a (32768, 256) float32
temporary (33.5 MB) costs page faults that a (16384, 256) one does not, and
the group-scaling figure would measure the allocator instead of the code.
A fixed threshold sends every large temporary down the same path at both sizes.
Set ``MALLOC_MMAP_THRESHOLD_`` yourself to choose another value.
"""

import os
import sys
from pathlib import Path

MALLOC_ENV = "MALLOC_MMAP_THRESHOLD_"
MALLOC_VALUE = str(1 << 20)

if __name__ == "__main__" and sys.platform.startswith("linux") and MALLOC_ENV not in os.environ:
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, MALLOC_ENV: MALLOC_VALUE})

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dataflex_bench.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
