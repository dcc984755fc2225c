"""The lab's tests import their shared helpers (``ledger_steps``) from this folder (pytest's importlib mode does not
put it on ``sys.path``)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
