"""Scorers that read outcome rewards, per sample and per GRPO group.

Importing this package registers ``reward_difficulty``, ``group_solve_rate``
and ``group_reward_variance``; the ``dataflex`` entry point names this module.
"""

from .difficulty import RewardDifficultyScorer
from .groups import GroupRewardVarianceScorer, GroupSolveRateScorer
from .version import __version__

__all__ = ["GroupRewardVarianceScorer", "GroupSolveRateScorer", "RewardDifficultyScorer", "__version__"]
