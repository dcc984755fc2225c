"""DataFlex for TRL: the same scorers, reweighters, selectors and mixers inside ``trl.GRPOTrainer``.

``DataFlexGRPOTrainer`` takes ``GRPOTrainer``'s arguments plus ``dataflex={...}``,
the block verl users write under ``dataflex:``. Tested with TRL 1.16
(:data:`SUPPORTED_TRL`).
"""

from .trainer import DataFlexGRPOTrainer
from .version import __version__

#: TRL versions this release is built and tested against (the private methods it overrides change between minors).
SUPPORTED_TRL = ">=1.16,<1.17"

__all__ = ["SUPPORTED_TRL", "DataFlexGRPOTrainer", "__version__"]
