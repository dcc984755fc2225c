"""Example DataFlex plugin: importing it registers ``response_length`` and ``centered_linear``.

The ``dataflex`` entry point in pyproject.toml names this module, so an
installed copy is discovered without the user importing anything.
"""

from .reweighters import CenteredLinearReweighter
from .scorers import ResponseLengthScorer
from .version import __version__

__all__ = ["CenteredLinearReweighter", "ResponseLengthScorer", "__version__"]
