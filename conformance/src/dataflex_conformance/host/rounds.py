"""The generation-rounds suite: what ``mechanism: filter`` owes a user on a host with the generation-rounds seam.

- **every trained group is whole and admitted, and the batch stays full**: each step trains its batch's number
  of groups, each with every rollout of one prompt, all of them groups the filter admitted (the kit's rewards: an
  odd prompt's vary, an even prompt's do not);
- **the caps hold**: a step still short after ``filter.max_rounds`` stops naming the cap (``on_short: raise``)
  or is completed within them (``on_short: backfill``);
- **the same seed admits the same prompts**.
"""

from __future__ import annotations

import pytest
import torch

from dataflex_core import InvalidOutputError, group_index, segment_max, segment_min
from dataflex_core.session import GenerationRounds

from .components import BLOCKS
from .harness import RoundsStep
from .suite import SeamSuite

#: Steps the suite runs; ``max_rounds`` of the ``rounds`` block.
STEPS = 2
MAX_ROUNDS = int(BLOCKS["rounds"]["filter"]["max_rounds"])


def assert_whole_and_full(step: RoundsStep, at: int) -> torch.Tensor:
    """The step trains ``groups`` groups of ``group_size`` rows, one prompt each; its groups' prompts (in the
    order of their ``uid``s)."""
    prompts = torch.as_tensor(step.prompts, dtype=torch.int64)
    groups, count = group_index(step.uids)
    sizes = torch.bincount(groups, minlength=count)
    assert count == step.groups, (
        f"step {at} trained {count} groups; its batch holds {step.groups} (a group split, or the batch not full)"
    )
    assert bool((sizes == step.group_size).all()), (
        f"step {at} trained groups of {sizes.tolist()} rows; every group has {step.group_size} rollouts"
    )
    ids = prompts.to(torch.float64)  # exact for any dataset index below 2**53
    first, last = segment_min(ids, groups, count), segment_max(ids, groups, count)
    assert torch.equal(first, last), f"step {at} has a group of rows of several prompts: {prompts.tolist()}"
    return first.to(torch.int64)


class GenerationRoundsSuite(SeamSuite):
    """``mechanism: filter`` through :meth:`~dataflex_conformance.host.HostHarness.rounds`."""

    seam = GenerationRounds

    def test_every_trained_group_is_whole_and_admitted_and_the_batch_stays_full(self, host):
        steps = host.rounds(BLOCKS["rounds"], STEPS)
        assert len(steps) == STEPS, f"the harness returned {len(steps)} steps for {STEPS}"
        for at, step in enumerate(steps, 1):
            prompts = assert_whole_and_full(step, at)
            even = prompts[prompts % 2 == 0]
            assert even.numel() == 0, f"step {at} trained prompts {even.tolist()}, whose rewards do not vary"
            assert 1 <= step.rounds <= MAX_ROUNDS, f"step {at} took {step.rounds} rounds (max_rounds={MAX_ROUNDS})"
        assert any(step.rounds > 1 for step in steps), (
            "no step needed a refill round: the harness's first batches must hold even prompts"
        )

    def test_a_step_still_short_after_max_rounds_stops_naming_the_cap(self, host):
        with pytest.raises(InvalidOutputError, match=r"after 2 generation round\(s\) \(dataflex.filter.max_rounds=2\)"):
            host.rounds(BLOCKS["rounds_never"], 1)

    def test_on_short_backfill_completes_the_batch_within_max_rounds(self, host):
        (step,) = host.rounds(BLOCKS["rounds_backfill"], 1)
        assert_whole_and_full(step, 1)
        assert step.rounds == 2, f"admitting nothing, the step took {step.rounds} rounds; max_rounds is 2"

    def test_the_same_seed_admits_the_same_prompts(self, host):
        def trained() -> list[list[int]]:  # each step's rows' prompts in row order (uids may be fresh per run)
            return [torch.as_tensor(step.prompts).tolist() for step in host.rounds(BLOCKS["rounds"], STEPS)]

        first, again = trained(), trained()
        assert first == again, f"the same seed trained the prompts {first}, then {again}"
