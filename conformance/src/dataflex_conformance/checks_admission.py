"""Checks of admission: a selector that ``mechanism: filter`` uses to admit or evict whole GRPO groups.

Which selectors are certified: those that declare ``admits_groups = True``
(:class:`dataflex_core.Selector`). Being a valid selector is not enough:
``topk_fraction`` keeps the top rows and may split a group of tied scores,
which filter refuses at run time; and ``needs_groups`` says a component reads
``uid``, not that it keeps groups whole (``gfpo`` reads groups to keep part of
each). So the promise is declared, and certified on the scores filter feeds
it: synthetic scores equal within each group (``Case.group_scores``) and the
output of every installed group scorer (``needs_groups``, granularity
``prompt``, e.g. ``group_reward_variance``).

The batches are built as hosts build them: groups of unequal validity, a
group whose rows are all empty, framework padding rows (``is_padding``, an
empty ``response_mask``), singleton groups, a short last group. Which groups
are admitted is core's rule (:func:`dataflex_core.contracts.group_admission`,
the one filter applies); the output's shape and dtype are
``check_selection_valid``'s, run on these batches too, and scaling with the
number of groups is ``check_scales_linearly``'s (its rows come in groups of 8).
"""

from __future__ import annotations

import torch

from dataflex_core import group_index
from dataflex_core.contracts import group_admission
from dataflex_core.groups import segment_count, segment_max, segment_min
from dataflex_core.normalize import valid_sample_mask

from .batches import Sample
from .checks_actuator import kept_mask
from .checks_common import resumed as restored
from .probe import Probe
from .subjects import Subject


def _group_scores(probe: Probe, sample: Sample) -> torch.Tensor:
    """The scores filter would feed the selector; a group scorer's that differ within a group block the check.

    The promise is conditional on scores equal within each group, so a split group on a scorer's unequal scores
    is the scorer's fault: the result names it (``culprit``), not the selector.
    """
    scores = probe.scores(sample)
    source = probe.subject.source
    if not isinstance(source, Subject):
        return scores
    index, groups = group_index(sample.batch.non_tensor_batch["uid"])
    valid = valid_sample_mask(sample.batch).cpu()
    values = scores.detach().cpu().to(torch.float64)
    uneven = segment_max(values, index, groups, valid) > segment_min(values, index, groups, valid)  # empty: -inf > inf
    if uneven.any():
        raise probe.blocked(
            f"{source.component_id} (scorer)",
            f"group scorer {source.label} gave unequal scores within {int(uneven.sum())} group(s) (group indices "
            f"{uneven.nonzero().flatten().tolist()[:5]}); a group scorer's rows share their group's score",
            culprit=source.component_id,
        )
    return scores


def _admission(probe: Probe, component: object, sample: Sample) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(kept, admitted, partial)``: the selection as a mask of every row, and core's verdict per group."""
    out = probe.call(component, sample, _group_scores(probe, sample))
    kept = kept_mask(probe, out, sample).cpu()
    index, groups = group_index(sample.batch.non_tensor_batch["uid"])
    admitted, partial = group_admission(kept, index, groups, valid_sample_mask(sample.batch).cpu())
    return kept, admitted, partial


def check_admits_whole_groups(probe: Probe) -> None:
    """On scores equal within each group, every group's valid rows are all kept or all dropped."""
    sample = probe.sample()
    _, _, partial = _admission(probe, probe.component(), sample)
    if partial.any():
        groups = partial.nonzero().flatten().tolist()
        raise probe.fail(
            f"kept part of {len(groups)} group(s) (group indices {groups[:5]}), expected every valid row of a "
            "group kept or none: mechanism filter admits or evicts whole groups and refuses a partial one"
        )


def check_no_group_without_valid_row_admitted(probe: Probe) -> None:
    """No row of a group without a valid row (every row padding or an empty response) is kept."""
    sample = probe.sample()
    kept, _, _ = _admission(probe, probe.component(), sample)
    index, groups = group_index(sample.batch.non_tensor_batch["uid"])
    valid = valid_sample_mask(sample.batch).cpu()
    has_valid = segment_count(index, groups, valid) > 0
    wrong = kept & ~has_valid[index]
    if wrong.any():
        rows = wrong.nonzero().flatten().tolist()
        raise probe.fail(
            f"kept {len(rows)} row(s) (rows {rows[:5]}) of group(s) with no valid row, expected a group of padding "
            "and empty responses never admitted"
        )


def check_admission_state_round_trip(probe: Probe) -> None:
    """``state_dict`` saved as a checkpoint is and loaded into a fresh instance admits the same groups."""
    sample = probe.sample()
    used = probe.component()
    _admission(probe, used, sample)  # a step of use, whatever the selector keeps of it
    resumed = restored(probe, used)
    _, before, _ = _admission(probe, used, sample)
    _, after, _ = _admission(probe, resumed, sample)
    if not torch.equal(before, after):
        raise probe.fail(
            f"groups admitted after restoring state_dict() are {after.nonzero().flatten().tolist()}, the instance "
            f"it came from admits {before.nonzero().flatten().tolist()}, expected a resumed selector to admit as "
            "the one it resumes"
        )
