"""Token-level scorers read from the policy's own per-token outputs.

Importing this package registers ``token_prob`` and ``token_entropy``; the
``dataflex`` entry point names this module.
"""

from .scorers import TokenEntropyScorer, TokenProbScorer
from .version import __version__

__all__ = ["TokenEntropyScorer", "TokenProbScorer", "__version__"]
