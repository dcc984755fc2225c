"""DataFlex selectors: keep or drop rollouts by a scorer's signal.

Each selector returns a bool mask of shape ``(bs,)`` that never keeps padding
or empty rows; the host turns it into loss weights renormalised to mean one.
"""

from .advantage import group_advantage_on_subset, wants_recomputed_advantage
from .gfpo import GFPOSelector, token_efficiency
from .max_variance import MaxVarianceSelector
from .threshold_band import ThresholdBandSelector
from .topk_fraction import TopKFractionSelector
from .version import __version__

__all__ = [
    "GFPOSelector",
    "MaxVarianceSelector",
    "ThresholdBandSelector",
    "TopKFractionSelector",
    "__version__",
    "group_advantage_on_subset",
    "token_efficiency",
    "wants_recomputed_advantage",
]
