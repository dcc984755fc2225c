"""The resampling suite: what ``mechanism: curriculum`` (and mix, through the same seam) owes a user on a host
with the train-sampler seam: the framework's own dataloader draws the prompts DataFlex's sampler gives."""

from __future__ import annotations

import torch

from dataflex_core.session import TrainSampler

from .components import BLOCKS
from .suite import SeamSuite

#: Steps the suite draws.
STEPS = 4


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
