"""``mopps``: a Beta posterior over each prompt's success rate, sampled by Thompson sampling (MoPPS).

MoPPS (Model Predictive Prompt Selection, arXiv 2507.04632) treats each
prompt's success rate ``gamma_i`` under the current policy as a latent
variable with a Beta posterior, updated from the training rollouts alone, and
picks prompts from a posterior sample, so that no extra rollouts are spent on
judging prompts. After a step in which prompt ``i`` had ``k_i`` responses and
``s_i`` successes:

``alpha_i <- decay * alpha_i + (1 - decay) * alpha_0 + s_i``
``beta_i  <- decay * beta_i  + (1 - decay) * beta_0  + (k_i - s_i)``

starting from the prior ``Beta(alpha_0, beta_0)``. ``decay`` < 1 forgets old
evidence (the policy, and with it the success rate, keeps moving; MoPPS uses
this discounted update); ``decay = 1`` is the exact posterior of a fixed
rate. The score is a draw ``gamma_i ~ Beta(alpha_i, beta_i)`` (Thompson
sampling: uncertain prompts get varied draws, so they are explored), or with
``thompson: false`` the posterior mean ``alpha_i / (alpha_i + beta_i)``.
MoPPS then prefers prompts whose sampled rate is near a target (near 1/2);
pair it with the ``learnability`` sampler (weight ``gamma (1 - gamma)``,
largest at 1/2).

Determinism: each prompt's draw is a function of ``(seed, step_id, prompt
row)`` and its posterior (:mod:`~dataflex_curriculum.counter_beta`), so it
does not depend on which other prompts are candidates or in which order they
come, and a step costs O(candidates), not O(dataset). (Before 0.x the draws
came from numpy's sequential generator over every row: other values, the
same distribution.)
Fractional successes (rewards in ``[0, 1]``) update the posterior as
fractional counts.
"""

from __future__ import annotations

from typing import Any

import torch

from dataflex_core import Scorer, register_scorer

from .checks import number
from .counter_beta import beta_draws
from .prompt_table import PromptTable, prompt_indices


@register_scorer("mopps")
class MoPPSBetaPosterior(Scorer):
    """Thompson draw (or mean) of each prompt's Beta posterior success rate; scores in ``[0, 1]``.

    :param prior_alpha: ``alpha_0`` > 0 (default 1.0: with ``prior_beta`` 1, a uniform prior).
    :param prior_beta: ``beta_0`` > 0 (default 1.0).
    :param decay: ``lambda`` in ``(0, 1]``, the weight kept of old evidence per visit (default 1.0).
    :param thompson: draw from the posterior (default) rather than take its mean.
    :param seed: seed of the draws (each step draws with ``(seed, step_id)``).
    """

    timing = "pre_rollout"
    granularity = "prompt"
    requires = ["prompt_index"]
    score_range = (0.0, 1.0)

    def __init__(
        self,
        prior_alpha: float = 1.0,
        prior_beta: float = 1.0,
        decay: float = 1.0,
        thompson: bool = True,
        seed: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.prior_alpha = number("mopps", "prior_alpha", prior_alpha, 0.0, float("inf"), low_open=True)
        self.prior_beta = number("mopps", "prior_beta", prior_beta, 0.0, float("inf"), low_open=True)
        self.decay = number("mopps", "decay", decay, 0.0, 1.0, low_open=True)
        if not isinstance(thompson, bool):
            raise ValueError(f"mopps: thompson must be true or false, got {thompson!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"mopps: seed must be an integer >= 0, got {seed!r}")
        self.thompson = thompson
        self.seed = seed
        self.table = PromptTable({"alpha": self.prior_alpha, "beta": self.prior_beta})

    def posterior(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(alpha, beta)`` of the prompts ``index`` (the prior for prompts never observed)."""
        return self.table.get("alpha", index), self.table.get("beta", index)

    def score(self, batch: Any, step_id: int, **ctx: Any) -> torch.Tensor:
        index = prompt_indices(batch, "mopps")
        alpha, beta = self.posterior(index)
        if not self.thompson:
            rate = alpha / (alpha + beta)
        else:
            # a draw keyed by (seed, step, prompt): the same whatever the candidates, computed for them alone
            rate = beta_draws(alpha, beta, self.seed, int(step_id), index.cpu())
        return rate.to(torch.float32).to(batch.batch["prompt_index"].device)

    def observe(self, outcomes: Any, step_id: int, **ctx: Any) -> None:
        index = prompt_indices(outcomes, "mopps")
        rollouts = outcomes.batch["rollouts"].detach().to("cpu", torch.float64)
        successes = outcomes.batch["successes"].detach().to("cpu", torch.float64)
        seen = rollouts > 0
        index, rollouts = index[seen], rollouts[seen]
        successes = successes[seen].clamp(min=torch.zeros_like(rollouts), max=rollouts)
        alpha, beta = self.posterior(index)
        keep, renew = self.decay, 1.0 - self.decay
        self.table.set("alpha", index, keep * alpha + renew * self.prior_alpha + successes)
        self.table.set("beta", index, keep * beta + renew * self.prior_beta + (rollouts - successes))
        self.table.visit(index)

    def state_dict(self) -> dict[str, Any]:
        return self.table.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.table.load_state_dict(state)
