"""Which checks run on which component kind, over which cases, and their ids.

An id reads ``<component>[@<scores>]-<check>[<device>-<case>]``, e.g.
``advantage_magnitude-check_output_shape[cpu-bs=1]`` or
``softmax@advantage_magnitude-check_mean_one[cuda-empty_rows]``, so
``pytest -k`` and ``--xfail`` can name any part of it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from . import checks_actuator as act
from . import checks_admission as admission
from . import checks_allocation as alloc
from . import checks_common as common
from . import checks_output as output
from . import checks_padding as padding
from . import checks_prompts as prompts
from . import checks_scaling as scaling
from .batches import BatchFactory, Case, is_bounded, score_range_of
from .fields import FieldSynthesiser
from .probe import Probe
from .prompt_batches import PromptBatchFactory, PromptCase, is_prompt_world
from .prompt_probe import PromptProbe
from .subjects import Subject

F16 = torch.float16
BF16 = torch.bfloat16

# -- cases --------------------------------------------------------------------------------------
# Every case has an empty-response row (row 5, inside its uid group) unless it says otherwise
# or has fewer rows; the batches hold real rows only, as hosts hand them to components.

DEFAULT = Case("bs=8")
#: Batch layouts every output-shape/dtype/device/finite check runs on.
LAYOUTS = [
    DEFAULT,
    Case("bs=1", bs=1),
    Case("bs=2-one_empty", bs=2, empty_rows=(1,)),
    Case("L=1", length=1, empty_rows=(2,)),
    Case("bs=37-L=5", bs=37, length=5, group_size=5, empty_rows=(7, 20), seed=1),
    Case("bs=512-L=33", bs=512, length=33, group_size=8, empty_rows=(3, 100), seed=4),
    Case("empty_rows", empty_rows=(1, 5)),
    Case("empty_group", empty_rows=(4, 5, 6, 7)),
    Case("all_empty", empty_rows=tuple(range(8))),
    Case("one_group", group_size=8, empty_rows=(3,)),
    Case("singleton_groups", group_size=1, empty_rows=(2,)),
    Case("bf16", dtype=BF16),
    Case("fp16", dtype=F16),
]
#: Score distributions synthetic sources feed to actuators (on the default layout, empty row included).
DISTRIBUTIONS = [
    Case(f"scores={name}", scores=name, seed=i)
    for i, name in enumerate(
        ["normal", "constant", "zeros", "ties", "binary", "unit_interval", "huge", "huge_positive", "tiny", "negative"]
    )
]
BOUNDED_SCORE_CASES = [
    Case(f"scores={name}", scores=name, seed=i)
    for i, name in enumerate(["constant", "low", "high", "ties", "binary", "near_low", "near_high"])
]
CONSTANT_SCORES = [Case("scores=constant", scores="constant"), Case("scores=zeros", scores="zeros")]
PERMUTATIONS = [
    Case("perm=rows", bs=12, empty_rows=(5,), permutation="rows", seed=2),
    Case("perm=groups", bs=12, empty_rows=(5,), permutation="groups", seed=3),
]
#: Where empty-response rows sit: inside a group, a whole group, a lone row, L=1, a singleton group.
#: Batches the padding check inserts verl's padding rows into (empty rows and singleton groups beside them).
PADDING_CASES = [
    Case("padded", empty_rows=(5,)),
    Case("padded-empty_group", empty_rows=(4, 5, 6, 7)),
    Case("padded-singleton_groups", group_size=1, empty_rows=(2,)),
    Case("padded-groups_of_2", group_size=2, empty_rows=(3,)),
]
EMPTY_ROW_CASES = [
    DEFAULT,
    Case("empty_rows", empty_rows=(1, 5)),
    Case("empty_group", empty_rows=(4, 5, 6, 7)),
    Case("bs=2-one_empty", bs=2, empty_rows=(1,)),
    Case("L=1", length=1, empty_rows=(2,)),
    Case("singleton_groups", group_size=1, empty_rows=(2,)),
    Case("one_group", group_size=8, empty_rows=(3,)),
]
INVALID_UNITS = [
    DEFAULT,
    Case("empty_rows", empty_rows=(1, 5)),
    Case("empty_group", empty_rows=(4, 5, 6, 7)),
    Case("all_empty", empty_rows=tuple(range(8))),
]
MIXER_CASES = [
    DEFAULT,
    Case("bs=1", bs=1),
    Case("one_domain", num_domains=1),
    Case("empty_domains", bs=3, num_domains=6, empty_rows=(1,)),
    Case("scores=constant", scores="constant"),
    Case("scores=huge", scores="huge"),
    Case("scores=tiny", scores="tiny"),
    Case("scores=negative", scores="negative"),
]
#: Batches filter and pilot admit from, as hosts build them; scores equal within each group (a group scorer's).
ADMISSION_CASES = [
    Case("groups=unequal_validity", bs=12, empty_rows=(1, 5, 6), group_scores=True),
    Case("groups=one_all_empty", bs=12, empty_rows=(4, 5, 6, 7), scores="unit_interval", group_scores=True, seed=1),
    Case("groups=padding_rows", bs=12, empty_rows=(2,), padding_rows=(7, 10, 11), group_scores=True, seed=2),
    Case("groups=padding_group", bs=12, padding_rows=(8, 9, 10, 11), scores="unit_interval", group_scores=True, seed=3),
    Case("groups=singletons", group_size=1, empty_rows=(2,), group_scores=True, seed=4),
    Case("groups=bs=37-short_last", bs=37, length=5, group_size=5, empty_rows=(7, 20, 21), group_scores=True, seed=5),
    Case("groups=unit_interval", bs=16, empty_rows=(3,), scores="unit_interval", group_scores=True, seed=6),
    # pilot-sized groups (mechanism pilot admits on 2-4 pilot rollouts a prompt): a pair with one empty rollout,
    # a pair all empty, framework padding after them
    Case("groups=pilot_pairs", bs=12, group_size=2, empty_rows=(3, 6, 7), padding_rows=(10, 11), group_scores=True,
         seed=7),
    Case("groups=pilot_triples", bs=12, group_size=3, empty_rows=(1, 2), padding_rows=(11,), scores="unit_interval",
         group_scores=True, seed=8),
]  # fmt: skip
#: The scaling check's case: its rows are set by the check itself.
SCALING = [Case("rows=n-vs-2n")]


def _bounded(subject: Subject) -> bool:
    return is_bounded(score_range_of(subject.cls))


def _actuator_cases(subject: Subject) -> list[Case]:
    """Layouts for a real scorer source; layouts plus distributions for a synthetic one."""
    if not isinstance(subject.source, str):
        return list(LAYOUTS)
    return LAYOUTS + (BOUNDED_SCORE_CASES if _bounded(subject) else DISTRIBUTIONS[1:])


def _every_case(subject: Subject) -> list[Case]:
    """Every case the subject's kind meets (the mutation check runs on all of them)."""
    if subject.kind == "scorer":
        return list(LAYOUTS)
    if subject.kind == "mixer":
        return list(MIXER_CASES)
    return _actuator_cases(subject)


def _scaling_cases(subject: Subject) -> list[Case]:
    """Scorers alone, actuators with synthetic scores: the time measured is the subject's own."""
    return list(SCALING) if subject.source is None or isinstance(subject.source, str) else []


def _constant_cases(subject: Subject) -> list[Case]:
    """Constant scores, for synthetic sources of reweighters whose weights depend on the scores alone.

    A reweighter that also reads batch fields (e.g. the advantage's sign) may
    legitimately weigh rows differently under constant scores.
    """
    if not isinstance(subject.source, str):
        return []
    if set(subject.declared().requires) - {"response_mask", "is_padding"}:
        return []
    if _bounded(subject):
        return [c for c in BOUNDED_SCORE_CASES if c.scores in ("constant", "low", "high")]
    return list(CONSTANT_SCORES)


def _range_declared(cases: list[Case]) -> Callable[[Subject], list[Case]]:
    def pick(subject: Subject) -> list[Case]:
        declared = getattr(subject.cls, "score_range", None) is not None
        if subject.kind != "scorer":
            declared = declared and isinstance(subject.source, str)
        return list(cases) if declared else []

    return pick


def _admission_cases(subject: Subject) -> list[Case]:
    """A selector declaring ``admits_groups``, on scores equal within each group: synthetic ones or a group
    scorer's (``needs_groups``, granularity ``prompt``); other scorers may split a group, which is no fault of it."""
    if not getattr(subject.cls, "admits_groups", False):
        return []
    source = subject.source
    if isinstance(source, Subject):
        grouped = bool(source.cls.needs_groups) and source.cls.granularity == "prompt"
        return list(ADMISSION_CASES) if grouped else []
    return list(ADMISSION_CASES) if source == "sample_scores" else []


def _fixed(cases: list[Case]) -> Callable[[Subject], list[Case]]:
    return lambda subject: list(cases)


@dataclass(frozen=True)
class CheckDef:
    func: Callable[[Probe], None]
    cases: Callable[[Subject], list[Case]]

    @property
    def name(self) -> str:
        return self.func.__name__


_PURITY = [
    CheckDef(common.check_reads_only_declared, _fixed([DEFAULT, EMPTY_ROW_CASES[2]])),
    CheckDef(common.check_needs_groups_declared, _fixed([DEFAULT])),
    CheckDef(common.check_no_input_mutation, _every_case),
    CheckDef(common.check_no_autograd_graph, _fixed([DEFAULT])),
    CheckDef(common.check_deterministic, _fixed([DEFAULT, EMPTY_ROW_CASES[2]])),
    CheckDef(scaling.check_scales_linearly, _scaling_cases),
]

#: kind -> the checks it must pass.
CHECKS: dict[str, list[CheckDef]] = {
    "scorer": [
        CheckDef(output.check_output_shape, _fixed(LAYOUTS)),
        CheckDef(output.check_output_dtype, _fixed(LAYOUTS)),
        CheckDef(common.check_output_device, _fixed(LAYOUTS)),
        CheckDef(output.check_output_finite, _fixed(LAYOUTS)),
        *_PURITY,
        CheckDef(output.check_permutation_equivariant, _fixed(PERMUTATIONS)),
        CheckDef(output.check_empty_rows_ignored, _fixed(EMPTY_ROW_CASES)),
        CheckDef(padding.check_framework_padding_ignored, _fixed(PADDING_CASES)),
        CheckDef(output.check_scores_in_declared_range, _range_declared(LAYOUTS)),
    ],
    "reweighter": [
        CheckDef(output.check_output_shape, _actuator_cases),
        CheckDef(output.check_output_dtype, _actuator_cases),
        CheckDef(common.check_output_device, _actuator_cases),
        CheckDef(output.check_output_finite, _actuator_cases),
        CheckDef(act.check_weights_nonnegative, _actuator_cases),
        CheckDef(act.check_mean_one, _actuator_cases),
        CheckDef(act.check_invalid_units_zero, _fixed(INVALID_UNITS)),
        CheckDef(act.check_constant_scores_uniform, _constant_cases),
        CheckDef(act.check_rejects_out_of_range, _range_declared([DEFAULT])),
        CheckDef(output.check_empty_rows_ignored, _fixed(EMPTY_ROW_CASES)),
        CheckDef(padding.check_framework_padding_ignored, _fixed(PADDING_CASES)),
        *_PURITY,
    ],
    "selector": [
        CheckDef(act.check_selection_valid, _actuator_cases),
        CheckDef(act.check_rejects_out_of_range, _range_declared([DEFAULT])),
        CheckDef(common.check_output_device, _fixed([DEFAULT])),
        CheckDef(output.check_empty_rows_ignored, _fixed(EMPTY_ROW_CASES)),
        CheckDef(padding.check_framework_padding_ignored, _fixed(PADDING_CASES)),
        *[c for c in _PURITY if c.name != "check_no_autograd_graph"],
        # admission (mechanism filter): selectors that declare admits_groups
        CheckDef(act.check_selection_valid, _admission_cases),
        CheckDef(admission.check_admits_whole_groups, _admission_cases),
        CheckDef(admission.check_no_group_without_valid_row_admitted, _admission_cases),
        CheckDef(admission.check_admission_state_round_trip, _admission_cases),
    ],
    "mixer": [
        CheckDef(output.check_output_shape, _fixed(MIXER_CASES)),
        CheckDef(output.check_output_dtype, _fixed(MIXER_CASES)),
        CheckDef(common.check_output_device, _fixed(MIXER_CASES)),
        CheckDef(output.check_output_finite, _fixed(MIXER_CASES)),
        CheckDef(act.check_proportions_nonnegative, _fixed(MIXER_CASES)),
        CheckDef(act.check_proportions_sum_to_one, _fixed(MIXER_CASES)),
        CheckDef(output.check_empty_rows_ignored, _fixed([DEFAULT, MIXER_CASES[3]])),
        *_PURITY,
    ],
}

# -- the curriculum's components: candidate prompts instead of rollouts ------------------------------

P_DEFAULT = PromptCase("n=8")
P_OBSERVED = PromptCase("n=8-observed", observed=3, seed=1)
P_37 = PromptCase("n=37-observed", bs=37, observed=2, seed=2)
#: Candidate batches: fresh and after observing a few steps (all solved, all failed, fractional outcomes).
PROMPT_LAYOUTS = [
    P_DEFAULT,
    PromptCase("n=1", bs=1),
    P_OBSERVED,
    P_37,
    PromptCase("n=512-observed", bs=512, observed=4, seed=3),
]
PROMPT_SCALING = [PromptCase("rows=n-vs-2n")]


def _prompt_actuator_cases(subject: Subject) -> list[Case]:
    """Candidate layouts for a real scorer source; layouts plus score distributions for a synthetic one."""
    if not isinstance(subject.source, str):
        return list(PROMPT_LAYOUTS)
    cases = BOUNDED_SCORE_CASES if _bounded(subject) else DISTRIBUTIONS[1:]
    return PROMPT_LAYOUTS + [PromptCase(c.label, scores=c.scores, seed=c.seed) for c in cases]


def _prompt_constant_cases(subject: Subject) -> list[Case]:
    """Equal scores (synthetic sources only)."""
    if not isinstance(subject.source, str):
        return []
    cases = [c for c in _prompt_actuator_cases(subject) if c.scores in ("constant", "zeros", "low", "high")]
    return [PromptCase(c.label, bs=12, scores=c.scores, seed=c.seed) for c in cases]


def _prompt_scaling_cases(subject: Subject) -> list[Case]:
    return list(PROMPT_SCALING) if subject.source is None or isinstance(subject.source, str) else []


_PROMPT_PURITY = [
    CheckDef(prompts.check_prompt_fields_declared, _fixed([P_DEFAULT, P_OBSERVED])),
    CheckDef(prompts.check_prompts_not_mutated, _fixed(PROMPT_LAYOUTS)),
    CheckDef(common.check_no_autograd_graph, _fixed([P_OBSERVED])),
    CheckDef(prompts.check_prompts_deterministic, _fixed([P_DEFAULT, P_OBSERVED])),
    CheckDef(prompts.check_candidate_order_free, _fixed([P_OBSERVED, P_37])),
    CheckDef(scaling.check_scales_linearly, _prompt_scaling_cases),
]

#: kind -> the checks a ``pre_rollout`` scorer or a sampler must pass (they see candidate prompts).
PROMPT_CHECKS: dict[str, list[CheckDef]] = {
    "scorer": [
        CheckDef(output.check_output_shape, _fixed(PROMPT_LAYOUTS)),
        CheckDef(output.check_output_dtype, _fixed(PROMPT_LAYOUTS)),
        CheckDef(common.check_output_device, _fixed(PROMPT_LAYOUTS)),
        CheckDef(output.check_output_finite, _fixed(PROMPT_LAYOUTS)),
        CheckDef(prompts.check_state_round_trip, _fixed([P_OBSERVED, P_37])),
        CheckDef(prompts.check_prompt_scores_in_declared_range, _range_declared(PROMPT_LAYOUTS)),
        *_PROMPT_PURITY,
    ],
    "sampler": [
        CheckDef(output.check_output_shape, _prompt_actuator_cases),
        CheckDef(output.check_output_dtype, _prompt_actuator_cases),
        CheckDef(common.check_output_device, _prompt_actuator_cases),
        CheckDef(output.check_output_finite, _prompt_actuator_cases),
        CheckDef(prompts.check_probabilities_nonnegative, _prompt_actuator_cases),
        CheckDef(prompts.check_probabilities_sum_to_one, _prompt_actuator_cases),
        CheckDef(prompts.check_no_prompt_starved, _prompt_actuator_cases),
        CheckDef(prompts.check_constant_scores_uniform_probabilities, _prompt_constant_cases),
        CheckDef(prompts.check_sampler_rejects_out_of_range, _range_declared([P_DEFAULT])),
        *_PROMPT_PURITY,
    ],
    "allocator": [
        CheckDef(output.check_output_shape, _prompt_actuator_cases),
        CheckDef(common.check_output_device, _prompt_actuator_cases),
        CheckDef(alloc.check_allocation_meets_the_budget, _prompt_actuator_cases),
        CheckDef(alloc.check_no_prompt_below_the_declared_floor, _prompt_actuator_cases),
        CheckDef(alloc.check_allocation_state_round_trip, _fixed([P_OBSERVED, P_37])),
        # counts may break ties by candidate order (an even split's remainder), so order-freedom is not asked
        *[c for c in _PROMPT_PURITY if c.func is not prompts.check_candidate_order_free],
    ],
}


def checks_for(subject: Subject) -> list[CheckDef]:
    """The checks ``subject`` must pass: on candidate prompts for the curriculum's components, else on rollouts."""
    return PROMPT_CHECKS[subject.kind] if is_prompt_world(subject.cls) else CHECKS[subject.kind]


#: Every check name, for validating ``--xfail`` keys.
ALL_CHECK_NAMES = sorted({c.name for table in (CHECKS, PROMPT_CHECKS) for defs in table.values() for c in defs})


@dataclass
class CheckCall:
    """One check on one subject, case and device: call it to run the check."""

    subject: Subject
    check: CheckDef
    case: Case
    device: str
    fields: Mapping[str, FieldSynthesiser] | None = None

    @property
    def check_name(self) -> str:
        return self.check.name

    @property
    def id(self) -> str:
        return f"{self.subject.id}-{self.check_name}[{self.device}-{self.case.label}]"

    def factory(self) -> BatchFactory | PromptBatchFactory:
        who = f"{self.subject.kind} {self.subject.name!r}"
        if is_prompt_world(self.subject.cls):
            return PromptBatchFactory(self.subject.requires, self.fields, who)
        return BatchFactory(self.subject.requires, self.fields, who)

    def __call__(self, fields: Mapping[str, FieldSynthesiser] | None = None) -> None:
        """Run the check; raises CheckFailure / Blocked (AssertionError) when it does not hold."""
        call = self if fields is None else CheckCall(self.subject, self.check, self.case, self.device, fields)
        probe = PromptProbe if is_prompt_world(call.subject.cls) else Probe
        call.check.func(probe(call.subject, call.case, call.device, call.factory()))

    def __repr__(self) -> str:
        return f"CheckCall({self.id})"


def iter_check_calls(
    subjects: list[Subject], devices: list[str], fields: Mapping[str, FieldSynthesiser] | None = None
) -> list[CheckCall]:
    """Every (subject, check, case, device) combination, grouped by subject then device."""
    calls = []
    for subject in subjects:
        for device in devices:
            for check in checks_for(subject):
                for case in check.cases(subject):
                    calls.append(CheckCall(subject, check, case, device, fields))
    return calls
