"""Entry point of ``nox -s bench``: ``python benchmarks/run.py [--quick] [--json PATH] [--cases a,b]``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dataflex_bench.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
