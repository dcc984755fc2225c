"""DataFlex curriculum: choose the prompts worth rolling out, before rollout (``mechanism: curriculum``).

Scorers (``timing = "pre_rollout"``) estimate each candidate prompt's solve
rate from the history of its training rollouts; samplers turn the estimates
into the probabilities with which the next batch of prompts is drawn.
"""

from .greso import GresoSkip
from .greso_adaptive import GresoAdaptive
from .learnability import LearnabilitySampler
from .mopps import MoPPSBetaPosterior
from .prompt_table import PromptTable, prompt_indices
from .solve_rate_ema import SolveRateEMA
from .temperature import TemperatureSampler
from .version import __version__

__all__ = [
    "GresoAdaptive",
    "GresoSkip",
    "LearnabilitySampler",
    "MoPPSBetaPosterior",
    "PromptTable",
    "SolveRateEMA",
    "TemperatureSampler",
    "__version__",
    "prompt_indices",
]
