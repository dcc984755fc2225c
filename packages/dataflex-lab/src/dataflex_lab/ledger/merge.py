"""``dataflex ledger merge``: the ledgers of runs over one dataset as one, for a campaign spread across runs.

The rule, for ledgers given in the order their runs ran (``A`` then ``B``), prompt by prompt (matched by id):

- the counts add: ``times_sampled``, every ``rollouts*``, ``tokens_generated``, ``successes``, ``reward_sum``,
  ``reward_sq_sum``, ``uniform_reward_steps``;
- the solve-rate posterior combines the evidence, not the priors: the ledger stores the evidence (successes,
  rollouts) and derives ``Beta(a0 + s, b0 + r - s)`` from the prior ``(a0, b0)`` =
  :data:`~dataflex_core.ledger.SOLVE_RATE_PRIOR`, so the merge's posterior is
  ``Beta(a0 + s_A + s_B, b0 + f_A + f_B)`` = ``Beta(a_A + a_B - a0, b_A + b_B - b0)`` (adding the two posteriors'
  parameters would count the prior twice);
- the latest state is the later run's where it rolled the prompt out, else the earlier's: ``last_sampled_step``,
  ``last_success_rate``; the zero-variance streak continues the earlier one when every visit of the later run
  had no variance (``streak_B == times_sampled_B``), so it is the streak of the visits in a row;
- ``last_step`` is the larger.

So the ledger of a run's first steps merged with a fresh ledger of its later steps equals the ledger of the whole
run. Merge ledgers recorded independently: a run warm-started from another's ledger (``dataflex.ledger.load``)
already holds that ledger's counts, and merging the two would count them twice.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

from dataflex_core.ledger import PromptLedger

from .reading import LedgerError, load_ledger

#: Counters that add up across runs.
ADDED = (
    "times_sampled", "rollouts", "rollouts_trained", "rollouts_filtered", "tokens_generated", "successes",
    "reward_sum", "reward_sq_sum", "uniform_reward_steps",
)  # fmt: skip
#: Counters that are the later run's where it rolled the prompt out.
LATEST = ("last_sampled_step", "last_success_rate")


def merge_two(earlier: PromptLedger, later: PromptLedger, names: tuple[str, str] = ("A", "B")) -> PromptLedger:
    """``earlier`` and ``later`` as one ledger, in ``earlier``'s row order (the module's rule)."""
    if earlier.ids.key != later.ids.key:
        raise LedgerError(
            f"{names[0]} keys its prompts by {earlier.ids.key!r} and {names[1]} by {later.ids.key!r}: merge ledgers "
            "of runs over the same dataset"
        )
    if len(earlier) != len(later) or earlier.ids.digest() != later.ids.digest():
        raise LedgerError(
            f"{names[0]} ({len(earlier)} prompts, ids digest {earlier.ids.digest()}) and {names[1]} ({len(later)} "
            f"prompts, ids digest {later.ids.digest()}) were recorded for different datasets: merge ledgers of runs "
            "over the same dataset"
        )
    if earlier.success_threshold != later.success_threshold:
        raise LedgerError(
            f"{names[0]} counted successes with success_threshold={earlier.success_threshold!r} and {names[1]} with "
            f"{later.success_threshold!r}: their successes and posteriors do not add up"
        )
    rows = later.ids.rows(earlier.ids.values, f"the prompts of {names[0]}")  # later's row of each earlier prompt

    def b(name: str) -> torch.Tensor:
        return getattr(later, name)[rows]

    columns = {name: getattr(earlier, name) + b(name) for name in ADDED}
    sampled = b("times_sampled") > 0
    for name in LATEST:
        columns[name] = torch.where(sampled, b(name), getattr(earlier, name))
    streak = b("uniform_reward_streak")
    unbroken = streak == b("times_sampled")  # every later visit (or none) without variance
    columns["uniform_reward_streak"] = torch.where(unbroken, earlier.uniform_reward_streak + streak, streak)
    merged = PromptLedger(earlier.ids, earlier.success_threshold)
    state = merged.state_dict()
    state.update(columns, last_step=max(earlier.last_step, later.last_step))
    merged.load_state_dict(state, "the merged ledger")  # the merge checked as a checkpoint is (e.g. s <= r)
    return merged


def merge_ledgers(paths: Sequence[str | os.PathLike[str]]) -> PromptLedger:
    """The ledgers at ``paths`` (Parquet exports or checkpoint folders, in the order their runs ran) as one."""
    if len(paths) < 2:
        raise LedgerError(f"dataflex ledger merge needs two ledgers or more, got {len(paths)}")
    merged = load_ledger(paths[0])
    for index, path in enumerate(paths[1:], start=1):
        merged = merge_two(merged, load_ledger(path), (_name(paths, index - 1), os.fspath(path)))
    return merged


def _name(paths: Sequence[str | os.PathLike[str]], index: int) -> str:
    return os.fspath(paths[0]) if index == 0 else f"the merge of {', '.join(map(os.fspath, paths[: index + 1]))}"
