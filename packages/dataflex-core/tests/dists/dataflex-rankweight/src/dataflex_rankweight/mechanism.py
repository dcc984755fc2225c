"""``mechanism: rank_weight``: rows ranked by a ranker's keys get weights linear in their rank, mean one.

The lowest valid row weighs ``1 - spread``, the highest ``1 + spread``; tied keys share their mean rank, so the
weights do not depend on row order. Rows without a response weigh 0. The weights go to the host through the
loss-weights seam, normalised in the loss's unit by the step (``LossMechanism``).
"""

from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from dataflex_core import valid_sample_mask
from dataflex_core.keys import Key, parse_keys
from dataflex_core.mechanisms import LossMechanism, check_rollout_time
from dataflex_core.step.calls import component_label
from dataflex_core.step.outputs import checked_scores

from .ranker import check_keys

#: Block key of this mechanism.
SPREAD_KEY = "rank_spread"


def mean_ranks(keys: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Rank of each valid row among the valid rows, 0 = lowest key, ties at their mean rank; 0 elsewhere."""
    chosen = keys[valid].to(torch.float64)
    ordered = torch.sort(chosen).values
    below = torch.searchsorted(ordered, chosen, right=False)
    through = torch.searchsorted(ordered, chosen, right=True)
    ranks = torch.zeros(keys.shape, dtype=torch.float64)
    ranks[valid] = (below + through - 1).to(torch.float64) / 2
    return ranks


class RankWeight(LossMechanism):
    """Weights linear in each row's rank by the ranker's keys."""

    name: ClassVar[str] = "rank_weight"
    actuator_kind: ClassVar[str] = "ranker"
    keys: ClassVar[Mapping[str, Any]] = {
        SPREAD_KEY: Key(
            float, "the lowest row weighs 1 - spread, the highest 1 + spread", default=0.5, low=0, high=1,
            example=f"{SPREAD_KEY}: 0.5",
        ),
    }  # fmt: skip

    def parse(self, block: Mapping[str, Any]) -> float:
        return parse_keys(self.keys, block, "dataflex", partial=True)[SPREAD_KEY]

    @classmethod
    def check(cls, pipeline, host, loss_unit) -> None:
        check_rollout_time(pipeline, host, cls.name)

    def weights(self, step, batch, step_id) -> torch.Tensor:
        valid = valid_sample_mask(batch)
        scores = checked_scores(step.calls, batch, step_id, step.ctx, valid=valid)
        keys = step.calls.call("actuator", "act", scores, batch, at_step=step_id, step_id=step_id, **step.ctx)
        keys = check_keys(keys, valid, owner=component_label(step.pipeline, "actuator"), step=step_id)
        ranks = mean_ranks(keys, valid)
        top = max(int(valid.sum()) - 1, 1)
        weights = 1 + self.settings * (2 * ranks / top - 1)
        return torch.where(valid, weights, torch.zeros(())).to(torch.float32)
