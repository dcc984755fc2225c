"""``odm``: Online Data Mixing with EXP3 (arXiv 2312.02406).

ODM treats domains as the arms of an adversarial bandit. The reward of an arm
is the training signal of its data (the paper uses the language-model loss:
data the model still finds hard is worth more); the estimate is an
exponential moving average of importance-weighted rewards, and the policy is
EXP3 with a decaying exploration rate:

``eps_t = min(1/K, sqrt(ln K / (K t)))``
``R_d <- alpha R_d + (1 - alpha) r_d / pi_d``  (for domains observed at step t)
``pi_d = (1 - K eps_t) exp(eps_{t-1} R_d) / sum_j exp(eps_{t-1} R_j) + eps_t``

``r_d`` is the domain's mean signal at the step and ``pi_d`` the proportion
it was sampled with. The paper draws a whole batch from one domain; with
batches mixing domains every sampled domain is updated each step, each with
its own importance weight. The estimate is cumulative by design (the EMA is
the method's forgetting), so this mixer has no window.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from dataflex_core import register_mixer

from .base import DomainMixer


@register_mixer("odm")
class ODMMixer(DomainMixer):
    """EXP3 over domains with an EMA of importance-weighted rewards.

    :param alpha: smoothing of the reward estimate, in ``[0, 1)`` (default 0.9).
    """

    def __init__(self, alpha: float = 0.9, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 <= alpha < 1.0:
            raise ValueError(f"odm: alpha must be in [0, 1), got {alpha!r}")
        self.alpha = float(alpha)
        self.reward_estimate = torch.zeros(0, dtype=torch.float64)
        self.updates = 0

    def _on_bind(self, num_domains: int) -> None:
        self.reward_estimate = torch.zeros(num_domains, dtype=torch.float64)

    def exploration_rate(self, t: int) -> float:
        k = len(self.domains)
        if t <= 0 or k == 1:
            return 1.0 / k
        return min(1.0 / k, math.sqrt(math.log(k) / (k * t)))

    def _record(self, step_id: Any, mean: torch.Tensor, count: torch.Tensor) -> None:
        sampled_with = self.current_proportions(self.domains).to(torch.float64)
        seen = count > 0
        weighted = mean / sampled_with.clamp(min=1e-12)
        updated = self.alpha * self.reward_estimate + (1.0 - self.alpha) * weighted
        self.reward_estimate = torch.where(seen, updated, self.reward_estimate)
        self.updates += 1

    def propose(self) -> torch.Tensor:
        k = len(self.domains)
        eps_now = self.exploration_rate(self.updates)
        eps_before = self.exploration_rate(self.updates - 1)
        exploit = torch.softmax(eps_before * self.reward_estimate, dim=0)
        return (1.0 - k * eps_now) * exploit + eps_now

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update(reward_estimate=self.reward_estimate.tolist(), updates=self.updates)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if self.domains is not None:
            self.reward_estimate = torch.tensor(state["reward_estimate"], dtype=torch.float64)
            self.updates = int(state["updates"])
