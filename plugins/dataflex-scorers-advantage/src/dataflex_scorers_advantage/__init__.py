"""Scorers that read the advantages verl has just computed.

Importing this package registers ``advantage_magnitude`` and
``advantage_signed``; the ``dataflex`` entry point names this module, so an
installed copy is discovered without any import by the user.
"""

from .scorers import AdvantageMagnitudeScorer, AdvantageSignedScorer
from .version import __version__

__all__ = ["AdvantageMagnitudeScorer", "AdvantageSignedScorer", "__version__"]
