"""Per-token reweighters: scores (bs, L) in, float32 weights (bs, L) with mean one over valid tokens out.

Importing this package registers ``advantage_reweight`` and
``high_entropy_tokens``; the ``dataflex`` entry point names this module.
"""

from .advantage_reweight import AdvantageReweightReweighter
from .high_entropy import HighEntropyTokensReweighter
from .version import __version__

__all__ = ["AdvantageReweightReweighter", "HighEntropyTokensReweighter", "__version__"]
