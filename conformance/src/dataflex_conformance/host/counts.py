"""The per-prompt counts suite: what ``mechanism: allocate`` owes a user on a host with the per-prompt counts seam.

- **the budget holds and each prompt gets its allocation**: a batch's counts sum to its budget (prompts times the
  framework's uniform count), every one at least ``n_min``, and they are the allocator's (``hostkit_favour``: the
  even prompts get every rollout past ``n_min``), in the order of the prompts;
- **each prompt got exactly its count, under one uid**: the framework generated ``counts[i]`` rollouts in prompt
  ``i``'s group and no rollout outside the batch's groups.
"""

from __future__ import annotations

from collections import Counter

import torch

from dataflex_core.contracts import GROUP_MIN_ROLLOUTS
from dataflex_core.session import PromptCounts

from .components import BLOCKS, favoured_counts
from .harness import CountsStep
from .suite import SeamSuite

#: Batches of prompts the suite dispatches.
STEPS = 2


def _batches(host) -> list[CountsStep]:
    batches = host.counts(BLOCKS["counts"], STEPS)
    assert len(batches) == STEPS, f"the harness returned {len(batches)} batches for {STEPS}"
    return batches


class PromptCountsSuite(SeamSuite):
    """``mechanism: allocate`` through :meth:`~dataflex_conformance.host.HostHarness.counts`."""

    seam = PromptCounts

    def test_the_budget_holds_and_each_prompt_gets_its_allocation(self, host):
        for at, batch in enumerate(_batches(host), 1):
            prompts = torch.as_tensor(batch.prompts, dtype=torch.int64)
            counts = torch.as_tensor(batch.counts, dtype=torch.int64)
            budget = len(prompts) * int(batch.rollout_n)
            assert int(counts.sum()) == budget, f"batch {at} asked for {int(counts.sum())} rollouts; budget {budget}"
            assert int(counts.min()) >= GROUP_MIN_ROLLOUTS, f"batch {at} gave a prompt {int(counts.min())} rollouts"
            expected = favoured_counts(prompts % 2 == 0, budget, GROUP_MIN_ROLLOUTS)
            assert torch.equal(counts, expected), (
                f"batch {at} of prompts {prompts.tolist()} asked for {counts.tolist()}; the allocator gave "
                f"{expected.tolist()}"
            )

    def test_each_prompt_got_exactly_its_count_under_one_uid(self, host):
        for at, batch in enumerate(_batches(host), 1):
            uids = [str(u) for u in batch.uids]
            assert len(set(uids)) == len(uids), f"batch {at} gave two prompts one uid: {uids}"
            generated = Counter(str(u) for u in batch.generated)
            asked = dict(zip(uids, torch.as_tensor(batch.counts).tolist()))
            got = {uid: generated.get(uid, 0) for uid in uids}
            assert got == asked, f"batch {at}: the framework generated {got} rollouts per uid; the host asked {asked}"
            other = set(generated) - set(uids)
            assert not other, f"batch {at} generated rollouts under uids {sorted(other)} of no prompt of the batch"
