"""``mechanism: pilot`` in TRL: a step generated in stages, its trained groups assembled whole.

TRL generates ``num_generations`` completions of each prompt in one call and
computes its group advantages by viewing the rewards as ``(-1,
num_generations)``. The staged-generation seam asks per stage for a number of
rollouts of some prompts (a few pilot rollouts of each screened prompt, then
the rest of each admitted prompt's group under the same ``uid``), so the host
calls TRL's own ``_generate_and_score_completions`` once per stage with every
prompt of the stage repeated its count (the same count for all of them: one
screening count, one top-up count), then assembles the trained rows of every
stage into one generation batch in which each group's rows are consecutive
(pilot rollouts first, then the commit's), recomputing TRL's group advantages
on the whole groups (:func:`dataflex_trl.advantages.grpo_advantages`).
"""

from __future__ import annotations

import torch

from dataflex_core import DataFlexError
from dataflex_core.session import StageRequests


def uniform_count(requests: StageRequests) -> int:
    """The one number of rollouts a stage asks for each of its prompts (TRL groups a call's rows evenly).

    :raises DataFlexError: the stage asks for different counts.
    """
    counts = requests.counts
    if len(counts) == 0 or bool((counts != counts[0]).any()) or int(counts[0]) < 1:
        raise DataFlexError(
            f"a generation stage asked for {counts.tolist()[:8]} rollouts of its prompts, but DataFlexGRPOTrainer "
            "generates a stage with one TRL call, the same positive number of rollouts for every prompt; use a "
            "staged mechanism whose stages ask one count per stage (mechanism pilot)"
        )
    return int(counts[0])


def group_order(uids: list[torch.Tensor], group_size: int) -> torch.Tensor:
    """The order that puts the trained rows (each stage's, stage after stage, with their ``uids``) group by group,
    in ascending uid, each group's rows in stage order; every group must have ``group_size`` rows.

    :raises DataFlexError: a group of another size (the stages did not build whole groups).
    """
    uid = torch.cat(uids) if uids else torch.zeros(0, dtype=torch.long)
    order = torch.sort(uid, stable=True).indices
    _, sizes = torch.unique_consecutive(uid[order], return_counts=True)
    if bool((sizes != group_size).any()):
        raise DataFlexError(
            f"the staged step's trained groups have {sorted(set(sizes.tolist()))} rollouts, but TRL's loss needs "
            f"groups of num_generations={group_size}: the stages must top every trained prompt up to num_generations"
        )
    return order
