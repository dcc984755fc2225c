"""Shared setup of dataflex-conformance's own tests.

The meta tests' fixture components live in ``meta_tests/meta_good.py`` and
``meta_tests/meta_broken.py``; they are importable by name from every test.
"""

import sys
from pathlib import Path

META = Path(__file__).parent / "meta_tests"
if str(META) not in sys.path:
    sys.path.insert(0, str(META))
