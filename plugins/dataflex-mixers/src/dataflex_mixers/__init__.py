"""DataFlex mixers: domain sampling proportions from a scorer's per-domain signal.

Every mixer reduces the scorer's per-row signal to one value per domain per
training step, keeps its statistics across steps (saved with checkpoints via
``state_dict``), and returns proportions that sum to one. The host draws the
next prompts from the whole dataset by those proportions.
"""

from .base import DomainMixer, WindowedDomainMixer
from .dump_ucb import DumpUCBMixer
from .odm import ODMMixer
from .reward_gap import RewardGapMixer
from .static import StaticMixer
from .tscl import TSCLMixer
from .version import __version__

__all__ = [
    "DomainMixer",
    "DumpUCBMixer",
    "ODMMixer",
    "RewardGapMixer",
    "StaticMixer",
    "TSCLMixer",
    "WindowedDomainMixer",
    "__version__",
]
