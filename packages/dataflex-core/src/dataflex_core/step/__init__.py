"""The per-step pipeline every host runs, and what a host declares about itself.

A host maps its framework's names to the canonical vocabulary
(:mod:`.fields`), declares its capabilities (:class:`HostCapabilities`) and
holds a :class:`~dataflex_core.session.DataFlexSession`, which mounts the
``dataflex:`` block with :func:`mount_step` (all checks before the first
rollout) and calls :meth:`DataFlexStep.run` once per training step. See
:mod:`.core` for the order of the work and :mod:`dataflex_core.mechanisms`
for what each mechanism does in it.
"""

import importlib
import warnings
from typing import Any

from .blocks import BlockSampler, systematic_counts
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
    "LOSS_UNITS",
    "OUTCOME_FIELDS",
    "PROMPT_FIELDS",
    "SEQUENCE_UNIT",
    "TOKEN_UNIT",
    "BlockSampler",
    "CanonicalField",
    "CurriculumSampler",
    "DomainMixtureSampler",
    "FieldSupport",
    "HostCapabilities",
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
    "is_canonical",
    "is_prompt_field",
    "selection_metrics",
    "systematic_counts",
    "to_token_weights",
    "unit_mean",
    "weight_metrics",
]


#: Names that moved up to :mod:`dataflex_core.runner` (the runner sits above the mechanisms, which build on
#: these primitives); ``dataflex_core.step.<name>`` still finds them, with a DeprecationWarning, until 0.5.
MOVED_TO_RUNNER = frozenset(
    {"HOST_KEYS", "ON_INVALID", "DataFlexStep", "InvalidOutputPolicy", "MountedStep", "host_settings", "mount_step"}
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
