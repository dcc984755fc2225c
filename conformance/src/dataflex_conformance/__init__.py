"""dataflex-conformance: certify that DataFlex plugins keep the contracts hosts rely on.

Three ways in, one set of checks:

- ``dataflex-conformance [DIST ...]`` certifies installed plugins and writes a JSON report;
- ``parametrize_with_checks([...])`` turns every check into a pytest test with a readable id;
- ``certify_subjects`` / ``certify`` return the structured :class:`Report` for your own tooling.
"""

from .batches import BatchFactory, Case, Sample
from .certify import certify, certify_subjects
from .checks_actuator import (
    check_constant_scores_uniform,
    check_invalid_units_zero,
    check_mean_one,
    check_proportions_nonnegative,
    check_proportions_sum_to_one,
    check_selection_valid,
    check_weights_nonnegative,
)
from .checks_allocation import (
    check_allocation_meets_the_budget,
    check_allocation_state_round_trip,
    check_no_prompt_below_the_declared_floor,
)
from .checks_common import (
    check_deterministic,
    check_needs_groups_declared,
    check_no_autograd_graph,
    check_no_input_mutation,
    check_output_device,
    check_reads_only_declared,
)
from .checks_output import (
    check_empty_rows_ignored,
    check_output_dtype,
    check_output_finite,
    check_output_shape,
    check_permutation_equivariant,
)
from .checks_padding import check_framework_padding_ignored
from .checks_prompts import (
    check_candidate_order_free,
    check_constant_scores_uniform_probabilities,
    check_no_prompt_starved,
    check_probabilities_nonnegative,
    check_probabilities_sum_to_one,
    check_prompt_fields_declared,
    check_prompt_scores_in_declared_range,
    check_prompts_deterministic,
    check_prompts_not_mutated,
    check_sampler_rejects_out_of_range,
    check_state_round_trip,
)
from .checks_scaling import check_scales_linearly
from .fields import KNOWN_FIELDS, FieldContext, FieldSynthesiser, MissingFieldError
from .guarded import GuardedBatch, UndeclaredFieldError
from .parametrize import ENV_DEVICE, check_calls, parametrize_with_checks
from .probe import Blocked, CheckFailure, Probe
from .prompt_batches import PromptBatchFactory, PromptCase, PromptSample
from .prompt_probe import PromptProbe
from .report import Report, print_summary
from .runner import BLOCKED, EXPECTED_FAILURE, FAILED, PASSED, CheckResult, run_call
from .subjects import Subject
from .suite import ALL_CHECK_NAMES, CHECKS, PROMPT_CHECKS, CheckCall, checks_for, iter_check_calls
from .version import __version__

__all__ = [
    "ALL_CHECK_NAMES",
    "BLOCKED",
    "BatchFactory",
    "Blocked",
    "CHECKS",
    "Case",
    "CheckCall",
    "CheckFailure",
    "CheckResult",
    "ENV_DEVICE",
    "EXPECTED_FAILURE",
    "FAILED",
    "FieldContext",
    "FieldSynthesiser",
    "GuardedBatch",
    "KNOWN_FIELDS",
    "MissingFieldError",
    "PASSED",
    "PROMPT_CHECKS",
    "PromptBatchFactory",
    "PromptCase",
    "PromptProbe",
    "PromptSample",
    "Probe",
    "Report",
    "Sample",
    "Subject",
    "UndeclaredFieldError",
    "__version__",
    "certify",
    "certify_subjects",
    "check_calls",
    "check_allocation_meets_the_budget",
    "check_allocation_state_round_trip",
    "check_candidate_order_free",
    "check_constant_scores_uniform_probabilities",
    "check_no_prompt_below_the_declared_floor",
    "check_no_prompt_starved",
    "check_probabilities_nonnegative",
    "check_probabilities_sum_to_one",
    "check_prompt_fields_declared",
    "check_prompt_scores_in_declared_range",
    "check_prompts_deterministic",
    "check_prompts_not_mutated",
    "check_sampler_rejects_out_of_range",
    "check_state_round_trip",
    "checks_for",
    "check_constant_scores_uniform",
    "check_deterministic",
    "check_invalid_units_zero",
    "check_mean_one",
    "check_needs_groups_declared",
    "check_no_autograd_graph",
    "check_no_input_mutation",
    "check_output_device",
    "check_output_dtype",
    "check_output_finite",
    "check_output_shape",
    "check_empty_rows_ignored",
    "check_framework_padding_ignored",
    "check_permutation_equivariant",
    "check_proportions_nonnegative",
    "check_proportions_sum_to_one",
    "check_reads_only_declared",
    "check_scales_linearly",
    "check_selection_valid",
    "check_weights_nonnegative",
    "iter_check_calls",
    "parametrize_with_checks",
    "print_summary",
    "run_call",
]
