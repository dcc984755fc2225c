"""Entry point of ``nox -s bench``: ``python benchmarks/run.py [--quick] [--json PATH]``.

Runs with the allocator the environment gives (glibc's default, as verl's task
runner and TRL's trainer have it); the pair case also starts a child process
with glibc's mmap threshold fixed, for comparison (``--allocator``, see
``dataflex_bench/allocator.py`` and benchmarks/README.md).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dataflex_bench.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
