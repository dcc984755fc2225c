"""The step primitives every mechanism and every host builds on: the vocabulary, the contracts of a step.

Layers, bottom up: these primitives, the mechanisms (:mod:`dataflex_core.mechanisms`), the runner that mounts
and runs them (:mod:`dataflex_core.runner`), the host session (:mod:`dataflex_core.session`).
"""

from .blocks import BlockSampler, systematic_counts
from .context import StepContext
from .fields import CANONICAL_FIELDS, OUTCOME_FIELDS, PROMPT_FIELDS, is_prompt_field
from .history import PromptHistory, PromptIds
from .host import FieldSupport, HostCapabilities, SeamSupport
from .metrics import weight_metrics
from .mixture import DomainMixtureSampler
from .prompt_sampler import CurriculumSampler
from .result import StepResult
from .seams import GenerationRounds, LossWeights, StagedGeneration, TrainSampler
from .selection import selection_metrics
from .weights import SEQUENCE_UNIT, TOKEN_UNIT, finalize, to_token_weights, unit_mean

__all__ = [
    "CANONICAL_FIELDS",
    "OUTCOME_FIELDS",
    "PROMPT_FIELDS",
    "SEQUENCE_UNIT",
    "TOKEN_UNIT",
    "BlockSampler",
    "CurriculumSampler",
    "DomainMixtureSampler",
    "FieldSupport",
    "GenerationRounds",
    "HostCapabilities",
    "LossWeights",
    "PromptHistory",
    "PromptIds",
    "SeamSupport",
    "StepContext",
    "StagedGeneration",
    "StepResult",
    "TrainSampler",
    "finalize",
    "is_prompt_field",
    "selection_metrics",
    "systematic_counts",
    "to_token_weights",
    "unit_mean",
    "weight_metrics",
]
