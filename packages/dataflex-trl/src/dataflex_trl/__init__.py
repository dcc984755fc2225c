"""DataFlex for TRL: the same scorers, reweighters, selectors and mixers inside ``trl.GRPOTrainer``.

``DataFlexGRPOTrainer`` takes ``GRPOTrainer``'s arguments plus ``dataflex={...}``,
the block verl users write under ``dataflex:``. Tested with TRL 1.16
(:data:`SUPPORTED_TRL`). The trainer is imported on first use, so the console
script's ``--help`` (and the docs built from it) work without TRL installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .version import __version__

if TYPE_CHECKING:
    from .trainer import DataFlexGRPOTrainer

#: TRL versions this release is built and tested against (the private methods it overrides change between minors).
SUPPORTED_TRL = ">=1.16,<1.17"

__all__ = ["SUPPORTED_TRL", "DataFlexGRPOTrainer", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "DataFlexGRPOTrainer":
        from .trainer import DataFlexGRPOTrainer

        return DataFlexGRPOTrainer
    raise AttributeError(f"module 'dataflex_trl' has no attribute {name!r}")
