"""The step primitives every mechanism and every host builds on: the vocabulary, the contracts of a step.

A host maps its framework's names to the canonical vocabulary (:mod:`.fields`) and declares its
capabilities (:class:`HostCapabilities`); a mechanism (:mod:`dataflex_core.mechanisms`) runs in a
:class:`StepContext` and returns a :class:`StepResult`. The runner that mounts and runs them
(:mod:`dataflex_core.runner`) sits above the mechanisms, and the host session
(:class:`~dataflex_core.session.DataFlexSession`) above it.
"""

import importlib
import warnings
from typing import Any

from .blocks import BlockSampler, systematic_counts
from .context import StepContext
from .dataset import TrainDataset, dataset_column
from .fields import CANONICAL_FIELDS, OUTCOME_FIELDS, PROMPT_FIELDS, CanonicalField, is_canonical, is_prompt_field
from .history import PromptHistory, PromptIds, StepOutcomes
from .host import FieldSupport, HostCapabilities, SeamSupport
from .metrics import weight_metrics
from .mixture import DomainMixtureSampler
from .on_invalid import ON_INVALID, InvalidOutputPolicy
from .outputs import checked_scores, component_label
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

#: Names of 0.3 that moved up to :mod:`dataflex_core.runner` (the runner sits above the mechanisms, which build
#: on these primitives); ``dataflex_core.step.<name>`` still finds them, with a DeprecationWarning, until 0.5.
MOVED_TO_RUNNER = frozenset(
    {"HOST_KEYS", "DataFlexStep", "MountedStep", "check_pipeline", "host_settings", "mount_step"}
)


def __getattr__(name: str) -> Any:
    if name in MOVED_TO_RUNNER:
        warnings.warn(
            f"dataflex_core.step.{name} moved to dataflex_core.runner.{name}; the old path goes in 0.5",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module("dataflex_core.runner"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
