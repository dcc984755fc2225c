"""Per-sequence summaries of the token-level advantages A (``advantages``, shape (bs, L)).

Under GRPO every token of a response carries the same advantage, so the
masked mean is that value; under GAE it varies along the sequence and the
aggregation matters. Half-precision inputs are summed in float32 so a long
response does not lose its small terms.
"""

from __future__ import annotations

import torch

from dataflex_core import Scorer, masked_seq_max, masked_seq_mean, masked_seq_sum, register_scorer

#: Aggregations ``advantage_magnitude`` accepts, in the order shown in errors.
AGGREGATIONS = ("mean", "sum", "max")


def _as_float(x: torch.Tensor) -> torch.Tensor:
    """``x`` itself when it is float32/float64, else a float32 copy (bf16, fp16, ints)."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


@register_scorer("advantage_magnitude")
class AdvantageMagnitudeScorer(Scorer):
    """How large a sample's learning signal is: an aggregate of |A| over its response.

    Paper: the priority signal of Prioritized Experience Replay (arXiv 1511.05952),
    which ranks transitions by the magnitude of their TD error; here the
    advantage plays that role.

    Formula, with m the ``response_mask`` of row i:
    ``mean``: s_i = sum_t m_it |A_it| / max(1, sum_t m_it);
    ``sum``:  s_i = sum_t m_it |A_it|;
    ``max``:  s_i = max_{t: m_it=1} |A_it|.

    Inputs: ``advantages`` (bs, L) any float dtype, ``response_mask`` (bs, L).
    Output: (bs,) float32 (float64 for float64 input), non-negative.
    Edge cases: a row with an empty mask scores 0 under every ``agg``;
    padding positions are never read, so garbage (even NaN) there is ignored.

    :param agg: ``mean`` (default, the user guide's scorer), ``sum`` (favours
        long responses) or ``max``.
    """

    requires = ["advantages", "response_mask"]
    timing = "post_advantage"
    granularity = "prompt"
    needs_groups = False
    score_range = (0.0, float("inf"))

    def __init__(self, agg: str = "mean", **kwargs):
        super().__init__(**kwargs)
        if agg not in AGGREGATIONS:
            raise ValueError(f"advantage_magnitude agg={agg!r} is not supported; use one of {', '.join(AGGREGATIONS)}")
        self.agg = agg

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        # |A| is taken inside the masked reduction (magnitude=True): no full-size |A| tensor.
        adv = _as_float(batch.batch["advantages"])
        mask = batch.batch["response_mask"]
        if self.agg == "mean":
            return masked_seq_mean(adv, mask, magnitude=True)
        if self.agg == "sum":
            return masked_seq_sum(adv, mask, magnitude=True)
        return masked_seq_max(adv, mask, magnitude=True)


@register_scorer("advantage_signed")
class AdvantageSignedScorer(Scorer):
    """The sign-aware advantage of a sample: the masked mean of A over its response.

    Sign-aware reweighters (favouring or damping positive samples) need the
    sign that ``advantage_magnitude`` throws away.
    Paper: the advantage of GRPO (DeepSeekMath, arXiv 2402.03300), summarised
    per sequence.

    Formula: s_i = sum_t m_it A_it / max(1, sum_t m_it).
    Inputs: ``advantages`` (bs, L), ``response_mask`` (bs, L).
    Output: (bs,) float32 (float64 for float64 input), any sign.
    Edge cases: an empty row scores 0; padding positions are never read.
    """

    requires = ["advantages", "response_mask"]
    timing = "post_advantage"
    granularity = "prompt"
    needs_groups = False

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        return masked_seq_mean(_as_float(batch.batch["advantages"]), batch.batch["response_mask"])
