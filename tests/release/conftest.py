"""Release tests: make ``monorepo_dists`` (beside this file) importable under ``--import-mode=importlib``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
