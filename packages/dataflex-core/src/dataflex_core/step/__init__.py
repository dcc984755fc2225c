"""The step primitives every mechanism and every host builds on: the vocabulary, the contracts of a step.

Layers, bottom up: these primitives, the mechanisms (:mod:`dataflex_core.mechanisms`), the runner that mounts
and runs them (:mod:`dataflex_core.runner`), the host session (:mod:`dataflex_core.session`).
"""

from ..block import ON_INVALID
from .blocks import BlockSampler, systematic_counts
from .calls import component_label
from .context import StepContext
from .dataset import TrainDataset, dataset_column
from .fields import CANONICAL_FIELDS, OUTCOME_FIELDS, PROMPT_FIELDS, CanonicalField, is_canonical, is_prompt_field
from .history import PromptHistory, PromptIds, StepOutcomes
from .host import FieldSupport, HostCapabilities, SeamSupport
from .metrics import weight_metrics
from .mixture import DomainMixtureSampler
from .on_invalid import InvalidOutputPolicy
from .outputs import checked_scores
from .prompt_sampler import CurriculumSampler, candidate_batch, candidate_columns, candidate_fields
from .result import StepResult
from .seams import (
    SEAMS,
    GenerationRounds,
    LossWeights,
    PromptCounts,
    Seam,
    StagedGeneration,
    StageRequests,
    StepRounds,
    StepStages,
    TrainSampler,
)
from .selection import selection_metrics
from .weights import (
    LOSS_UNITS,
    SEQUENCE_UNIT,
    TOKEN_UNIT,
    applied_unit_mean,
    finalize,
    finalize_samples,
    to_token_weights,
    unit_mean,
)

__all__ = [
    "CANONICAL_FIELDS",
    "LOSS_UNITS",
    "ON_INVALID",
    "OUTCOME_FIELDS",
    "PROMPT_FIELDS",
    "SEAMS",
    "SEQUENCE_UNIT",
    "TOKEN_UNIT",
    "BlockSampler",
    "CanonicalField",
    "CurriculumSampler",
    "DomainMixtureSampler",
    "FieldSupport",
    "GenerationRounds",
    "HostCapabilities",
    "InvalidOutputPolicy",
    "LossWeights",
    "PromptCounts",
    "PromptHistory",
    "PromptIds",
    "Seam",
    "SeamSupport",
    "StepContext",
    "StepOutcomes",
    "StagedGeneration",
    "StageRequests",
    "StepResult",
    "StepRounds",
    "StepStages",
    "TrainDataset",
    "TrainSampler",
    "applied_unit_mean",
    "candidate_batch",
    "candidate_columns",
    "candidate_fields",
    "checked_scores",
    "component_label",
    "dataset_column",
    "finalize",
    "finalize_samples",
    "is_canonical",
    "is_prompt_field",
    "selection_metrics",
    "systematic_counts",
    "to_token_weights",
    "unit_mean",
    "weight_metrics",
]
