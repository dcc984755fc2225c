"""Length-aware weighting for GRPO: importing it registers ``length_zscore`` and ``zscore_tilt``.

The ``dataflex`` entry point in pyproject.toml names this module, so an
installed copy is discovered without the user importing anything.
"""

from .length_zscore import LengthZScoreScorer
from .version import __version__
from .zscore_tilt import ZScoreTiltReweighter

__all__ = ["LengthZScoreScorer", "ZScoreTiltReweighter", "__version__"]
