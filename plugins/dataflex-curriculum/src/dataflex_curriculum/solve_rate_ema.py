"""``solve_rate_ema``: each prompt's solve rate, an exponential moving average over the steps it was rolled out.

The simplest estimate of how hard a prompt is for the current policy is how
often its recent responses succeeded. After every step in which prompt ``i``
was rolled out with ``k_i`` responses, ``s_i`` of them successes (the host
counts a reward in ``[0, 1]`` as that fraction of a success, or applies
``dataflex.success_threshold``):

``r_i = s_i / k_i``,  ``ema_i <- (1 - alpha) * ema_i + alpha * r_i``,  ``ema_i`` starts at ``prior``

so an unseen prompt scores ``prior`` and a prompt's old outcomes fade as the
policy improves (``alpha = 1``: the last visit alone). Prioritising prompts
by a running pass rate is the online-filtering idea of SPEED-RL (arXiv
2506.09016) and balanced online difficulty filtering (arXiv 2504.03380),
here without spending extra rollouts on screening: the estimate comes from
the training rollouts themselves. Pair it with the ``learnability`` sampler
(weight ``p (1 - p)``).

Edge cases: a prompt whose responses were all empty is not visited (the host
leaves empty responses out); ``prior`` 0.5 makes unseen prompts the most
learnable under ``learnability``, so every prompt is tried early.
"""

from __future__ import annotations

from typing import Any

import torch

from dataflex_core import Scorer, register_scorer

from .checks import number
from .prompt_table import PromptTable, prompt_indices


@register_scorer("solve_rate_ema")
class SolveRateEMA(Scorer):
    """Per-prompt EMA of the solve rate, ``prior`` for prompts not yet rolled out; scores in ``[0, 1]``.

    :param alpha: weight of the newest visit, in ``(0, 1]`` (default 0.5).
    :param prior: the solve rate of an unseen prompt, in ``[0, 1]`` (default 0.5).
    """

    timing = "pre_rollout"
    granularity = "prompt"
    requires = ["prompt_index"]
    score_range = (0.0, 1.0)

    def __init__(self, alpha: float = 0.5, prior: float = 0.5, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.alpha = number("solve_rate_ema", "alpha", alpha, 0.0, 1.0, low_open=True)
        self.prior = number("solve_rate_ema", "prior", prior, 0.0, 1.0)
        self.table = PromptTable({"rate": self.prior})

    def score(self, batch: Any, step_id: int, **ctx: Any) -> torch.Tensor:
        index = prompt_indices(batch, "solve_rate_ema")
        rate = self.table.get("rate", index)
        return rate.to(torch.float32).to(batch.batch["prompt_index"].device)

    def observe(self, outcomes: Any, step_id: int, **ctx: Any) -> None:
        index = prompt_indices(outcomes, "solve_rate_ema")
        rollouts = outcomes.batch["rollouts"].detach().to("cpu", torch.float64)
        successes = outcomes.batch["successes"].detach().to("cpu", torch.float64)
        seen = rollouts > 0
        index, rate = index[seen], (successes[seen] / rollouts[seen]).clamp(0.0, 1.0)
        previous = self.table.get("rate", index)
        self.table.set("rate", index, (1.0 - self.alpha) * previous + self.alpha * rate)
        self.table.visit(index)

    def state_dict(self) -> dict[str, Any]:
        return self.table.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.table.load_state_dict(state)
