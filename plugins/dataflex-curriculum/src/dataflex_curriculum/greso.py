"""``greso``: skip prompts before rollout by how many of their latest visits gave no GRPO signal in a row.

GRESO (Zheng et al., "Act Only When It Pays", arXiv 2506.02177) observes that
a prompt whose group got one reward for every response (zero reward variance:
every advantage is 0, the rollouts move nothing) tends to stay that way, and
skips such prompts before rollout with a probability that grows with their
streak. With ``z_i`` the prompt's latest visits in a row without signal (the
ledger's ``uniform_reward_streak``) and an exploration probability ``p_e``, a
prompt is kept with probability

``keep_i = max(p_e ** z_i, min_keep)``

so a prompt never seen, or whose last visit had signal, is always a candidate
(``z_i = 0``), each further visit without signal halves its chance at
``p_e = 0.5``, and the floor ``min_keep`` leaves every prompt some chance of
being tried again (the exploration that finds prompts that became informative
as the policy moved). The paper adapts ``p_e`` during training towards a
target share of zero-variance prompts; this component keeps it fixed (``greso_adaptive``,
:mod:`dataflex_curriculum.greso_adaptive`, is the published method with its controller).

The score is ``log keep_i``, so the ``temperature`` sampler at
``temperature: 1`` draws each prompt with probability proportional to
``keep_i``: the batch is drawn full from the prompts not skipped. Under
``mechanism: filter`` with ``filter.draw`` the ledger counts every generation
round (evicted groups included), and refills draw from the same sampler, so
skipped prompts never shrink the trained batch. The scorer keeps no state of
its own: the streak lives in the ledger, which travels with the checkpoints.
"""

from __future__ import annotations

from typing import Any

import torch

from dataflex_core import Scorer, register_scorer

from .checks import number


def keep_probability(exploration: float, streak: torch.Tensor, min_keep: float) -> torch.Tensor:
    """GRESO's keep probability ``max(exploration ** streak, min_keep)`` (float64) of each prompt's streak."""
    keep = torch.pow(torch.tensor(exploration, dtype=torch.float64), streak.to(torch.float64))
    return keep.clamp(min=min_keep)


@register_scorer("greso")
class GresoSkip(Scorer):
    """``log max(p_e ** uniform_reward_streak, min_keep)`` per candidate prompt; at most 0.

    :param exploration: ``p_e`` in ``(0, 1]``, the keep probability per visit without signal (default 0.5).
    :param min_keep: the floor of the keep probability, in ``(0, 1]`` (default 0.05).
    """

    timing = "pre_rollout"
    granularity = "prompt"
    requires = ["uniform_reward_streak"]

    def __init__(self, exploration: float = 0.5, min_keep: float = 0.05, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.exploration = number("greso", "exploration", exploration, 0.0, 1.0, low_open=True)
        self.min_keep = number("greso", "min_keep", min_keep, 0.0, 1.0, low_open=True)

    def keep_probability(self, streak: torch.Tensor) -> torch.Tensor:
        """``max(p_e ** streak, min_keep)`` (float64) of each prompt's streak."""
        return keep_probability(self.exploration, streak, self.min_keep)

    def score(self, batch: Any, step_id: int, **ctx: Any) -> torch.Tensor:
        streak = batch.batch["uniform_reward_streak"]
        return torch.log(self.keep_probability(streak)).to(torch.float32)
