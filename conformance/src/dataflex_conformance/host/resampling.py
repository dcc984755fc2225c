"""The resampling suite: what ``mechanism: curriculum`` (and mix, through the same seam) owes a user on a host
with the train-sampler seam: the framework's own dataloader draws the prompts DataFlex's sampler gives, and a run
resumed mid-epoch from the framework's saved sampler state draws what the uninterrupted run draws."""

from __future__ import annotations

import torch

from dataflex_core.session import TrainSampler

from .components import BLOCKS
from .suite import SeamSuite

#: Steps the suite draws.
STEPS = 4
#: Where the round-trip test saves the sampler's state and restores it into a fresh loader (mid-epoch).
RESUME_AFTER = 2


def _ids(draws: list[torch.Tensor]) -> list[list[int]]:
    return [torch.as_tensor(d, dtype=torch.int64).tolist() for d in draws]


class ResamplingSuite(SeamSuite):
    """The train-sampler seam: :meth:`~dataflex_conformance.host.HostHarness.draws` over the framework's loader."""

    seam = TrainSampler

    def test_drawn_prompts_follow_the_sampler(self, host):
        draws = host.draws(BLOCKS["draw_even"], STEPS)
        assert len(draws) == STEPS and all(len(d) > 0 for d in draws), [len(d) for d in draws]
        drawn = torch.cat([torch.as_tensor(d, dtype=torch.int64) for d in draws])
        odd = drawn[drawn % 2 == 1]
        assert odd.numel() == 0, f"the framework drew prompts {odd.tolist()}, which the sampler gave probability 0"

    def test_a_uniform_sampler_draws_every_kind_of_prompt(self, host):
        drawn = torch.cat([torch.as_tensor(d, dtype=torch.int64) for d in host.draws(BLOCKS["draw_uniform"], STEPS)])
        assert (drawn % 2 == 1).any() and (drawn % 2 == 0).any(), (
            f"a uniform sampler drew {drawn.tolist()}: the harness's dataset needs even and odd ids"
        )

    def test_the_samplers_state_round_trips_mid_epoch(self, host):
        straight = _ids(host.draws(BLOCKS["draw_uniform"], STEPS))
        resumed = _ids(host.draws(BLOCKS["draw_uniform"], STEPS, resume_after=RESUME_AFTER))
        assert len(resumed) == STEPS, f"the harness returned {len(resumed)} batches for {STEPS} steps"
        assert resumed[:RESUME_AFTER] == straight[:RESUME_AFTER], (
            "the same seed drew other prompts before the save: the harness's draws must be seeded",
            straight,
            resumed,
        )
        assert resumed[RESUME_AFTER:] == straight[RESUME_AFTER:], (
            f"after restoring the sampler's state saved at step {RESUME_AFTER}, the framework drew "
            f"{resumed[RESUME_AFTER:]}; the uninterrupted run drew {straight[RESUME_AFTER:]}"
        )
