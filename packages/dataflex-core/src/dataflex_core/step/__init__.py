"""The per-step pipeline every host runs, and what a host declares about itself.

A host maps its framework's names to the canonical vocabulary
(:mod:`.fields`), declares its capabilities (:class:`HostCapabilities`),
mounts the ``dataflex:`` block with :func:`mount_step` (all checks before the
first rollout) and calls :meth:`DataFlexStep.run` (or :meth:`DataFlexStep.mix`,
:meth:`DataFlexStep.curriculum`) once per training step. See :mod:`.core` for the order of the work.
"""

from .core import HOST_KEYS, ON_INVALID, DataFlexStep, MountedStep, StepResult, host_settings, mount_step, step_fields
from .curriculum import (
    CURRICULUM_KEYS,
    CurriculumSettings,
    candidate_batch,
    candidate_columns,
    candidate_fields,
    curriculum_settings,
    curriculum_step,
)
from .fields import CANONICAL_FIELDS, OUTCOME_FIELDS, PROMPT_FIELDS, CanonicalField, is_canonical, is_prompt_field
from .history import PromptHistory, PromptIds, StepOutcomes
from .host import FieldSupport, HostCapabilities, check_curriculum, check_fields, check_pipeline
from .metrics import weight_metrics
from .mix import MIX_KEYS, MixSettings, domain_ids, initial_proportions, mix_settings, mix_step
from .outputs import checked_scores, component_label
from .prompt_sampler import CurriculumSampler
from .runners import RUNNERS, WEIGHTLESS_MECHANISMS, run_reweight, run_select
from .sampler import DomainMixtureSampler, systematic_counts
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
    "CURRICULUM_KEYS",
    "HOST_KEYS",
    "LOSS_UNITS",
    "MIX_KEYS",
    "ON_INVALID",
    "RUNNERS",
    "SEQUENCE_UNIT",
    "TOKEN_UNIT",
    "WEIGHTLESS_MECHANISMS",
    "CanonicalField",
    "CurriculumSampler",
    "CurriculumSettings",
    "DataFlexStep",
    "DomainMixtureSampler",
    "FieldSupport",
    "HostCapabilities",
    "MixSettings",
    "MountedStep",
    "OUTCOME_FIELDS",
    "PROMPT_FIELDS",
    "PromptHistory",
    "PromptIds",
    "StepOutcomes",
    "StepResult",
    "applied_unit_mean",
    "candidate_batch",
    "candidate_columns",
    "candidate_fields",
    "check_curriculum",
    "check_fields",
    "check_pipeline",
    "checked_scores",
    "component_label",
    "curriculum_settings",
    "curriculum_step",
    "domain_ids",
    "finalize",
    "finalize_samples",
    "host_settings",
    "initial_proportions",
    "is_canonical",
    "is_prompt_field",
    "mix_settings",
    "mix_step",
    "mount_step",
    "run_reweight",
    "run_select",
    "selection_metrics",
    "step_fields",
    "systematic_counts",
    "to_token_weights",
    "unit_mean",
    "weight_metrics",
]
