"""The per-step pipeline every host runs, and what a host declares about itself.

A host maps its framework's names to the canonical vocabulary
(:mod:`.fields`), declares its capabilities (:class:`HostCapabilities`) and
holds a :class:`~dataflex_core.session.DataFlexSession`, which mounts the
``dataflex:`` block with :func:`mount_step` (all checks before the first
rollout) and calls :meth:`DataFlexStep.run` once per training step. See
:mod:`.core` for the order of the work and :mod:`dataflex_core.mechanisms`
for what each mechanism does in it.
"""

from .blocks import BlockSampler, systematic_counts
from .core import HOST_KEYS, ON_INVALID, DataFlexStep, InvalidOutputPolicy, MountedStep, host_settings, mount_step
from .fields import CANONICAL_FIELDS, OUTCOME_FIELDS, PROMPT_FIELDS, CanonicalField, is_canonical, is_prompt_field
from .history import PromptHistory, PromptIds, StepOutcomes
from .host import FieldSupport, HostCapabilities, check_pipeline
from .metrics import weight_metrics
from .mixture import DomainMixtureSampler
from .outputs import checked_scores, component_label
from .prompt_sampler import CurriculumSampler, candidate_batch, candidate_columns, candidate_fields
from .result import StepResult
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
    "HOST_KEYS",
    "LOSS_UNITS",
    "ON_INVALID",
    "OUTCOME_FIELDS",
    "PROMPT_FIELDS",
    "SEQUENCE_UNIT",
    "TOKEN_UNIT",
    "BlockSampler",
    "CanonicalField",
    "CurriculumSampler",
    "DataFlexStep",
    "DomainMixtureSampler",
    "FieldSupport",
    "HostCapabilities",
    "InvalidOutputPolicy",
    "MountedStep",
    "PromptHistory",
    "PromptIds",
    "StepOutcomes",
    "StepResult",
    "applied_unit_mean",
    "candidate_batch",
    "candidate_columns",
    "candidate_fields",
    "check_pipeline",
    "checked_scores",
    "component_label",
    "finalize",
    "finalize_samples",
    "host_settings",
    "is_canonical",
    "is_prompt_field",
    "mount_step",
    "selection_metrics",
    "systematic_counts",
    "to_token_weights",
    "unit_mean",
    "weight_metrics",
]
