"""Per-sample reweighters: scores (bs,) in, float32 weights (bs,) with mean one over valid rows out.

Importing this package registers ``softmax``, ``per_advantage``,
``difficulty_band``, ``grpo_lead``, ``focal`` and ``positive_downweight``;
the ``dataflex`` entry point names this module.
"""

from .difficulty import DifficultyBandReweighter, FocalReweighter, GrpoLeadReweighter
from .per_advantage import PerAdvantageReweighter
from .sign import PositiveDownweightReweighter
from .softmax import SoftmaxReweighter
from .version import __version__

__all__ = [
    "DifficultyBandReweighter",
    "FocalReweighter",
    "GrpoLeadReweighter",
    "PerAdvantageReweighter",
    "PositiveDownweightReweighter",
    "SoftmaxReweighter",
    "__version__",
]
