"""``solve_rate_posterior``: each prompt's expected solve rate under the ledger's Beta posterior.

The ledger counts, per prompt, its scored responses ``r_i`` and successes
``s_i`` (fractional for rewards in ``[0, 1]``). With the ledger's Beta prior
``(a, b)`` (:data:`dataflex_core.ledger.SOLVE_RATE_PRIOR`, uniform: ``a = b = 1``)
the posterior of the solve rate is ``Beta(a + s_i, b + r_i - s_i)`` and the
score is its mean

``p_i = (a + s_i) / (a + b + r_i)``

so an unseen prompt scores ``a / (a + b)`` (0.5): the allocators treat it as
the most uncertain prompt and give it rollouts, and no prompt ever scores
exactly 0 or 1 (a prompt solved ``k`` times in ``k`` scores ``(k + 1) / (k + 2)``).
It keeps no state of its own: the ledger is checkpointed and warm-started
for it (``dataflex.ledger.load``).
"""

from __future__ import annotations

from typing import Any

import torch

from dataflex_core import Scorer, register_scorer
from dataflex_core.ledger import SOLVE_RATE_PRIOR


@register_scorer("solve_rate_posterior")
class SolveRatePosterior(Scorer):
    """The Beta posterior mean of each prompt's solve rate, read from the ledger; scores in ``(0, 1)``.

    ``p_i = (a + s_i) / (a + b + r_i)`` with the ledger's prior ``(a, b) = (1, 1)``, ``r_i`` the prompt's scored
    responses and ``s_i`` its successes; an unseen prompt scores 0.5.
    """

    timing = "pre_rollout"
    granularity = "prompt"
    requires = ["rollouts", "successes"]
    score_range = (0.0, 1.0)

    def score(self, batch: Any, step_id: int, **ctx: Any) -> torch.Tensor:
        rollouts = batch.batch["rollouts"].to(torch.float64)
        successes = batch.batch["successes"].to(torch.float64).clamp(min=0).minimum(rollouts)
        a, b = SOLVE_RATE_PRIOR
        return (a + successes) / (a + b + rollouts)
