"""``response_length``: the number of response tokens of each sample."""

from __future__ import annotations

import torch

from dataflex_core import Scorer, register_scorer


@register_scorer("response_length")
class ResponseLengthScorer(Scorer):
    """How long each response is, in tokens.

    Formula: s_i = sum_t m_it, with m the ``response_mask``.
    Inputs: ``response_mask`` (bs, L).
    Output: (bs,) float32, >= 0.
    Edge cases: an empty row scores 0; padding rows are scored like any row
    (reweighters give them weight 0).
    """

    #: Every batch field score() reads; the host fetches exactly these.
    requires = ["response_mask"]
    #: The earliest point in the step where the inputs exist.
    timing = "post_reward"
    #: prompt/response -> one score per sample (bs,); token -> (bs, L).
    granularity = "response"
    #: True only if score() reads non_tensor_batch["uid"] (GRPO groups).
    needs_groups = False
    #: Scores always lie in this range (lets hosts and conformance pair components).
    score_range = (0.0, float("inf"))

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        return batch.batch["response_mask"].sum(-1, dtype=torch.float32)
