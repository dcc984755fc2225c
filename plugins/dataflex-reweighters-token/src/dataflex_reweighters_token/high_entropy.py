"""``high_entropy_tokens``: train only on the batch's highest-entropy tokens."""

from __future__ import annotations

import math

import numpy as np
import torch

from dataflex_core import Reweighter, actuator_scores, register_reweighter, valid_token_counts

from .selection import CHUNK, numpy_view, select_kth


def quantile_rank(quantile: float, count: int) -> int:
    """1-based rank of the smallest value at or above the linear ``quantile`` of ``count`` values.

    The linear-interpolated quantile (numpy's and torch's default) lies in
    [v_(floor(q(n-1))), v_(ceil(q(n-1)))] of the sorted values, and no value
    lies strictly between two neighbours, so "at or above the quantile" is
    "at or above the value of 0-based rank ceil(q(n-1))". Rounding q(n-1)
    first keeps 0.8 * 10 = 8.000000000000002 from becoming 9.
    """
    return math.ceil(round(quantile * (count - 1), 9)) + 1


@register_reweighter("high_entropy_tokens")
class HighEntropyTokensReweighter(Reweighter):
    """Keep the gradient only on tokens whose entropy is at or above the batch's q-quantile.

    A minority of high-entropy "forking" tokens carries most of the useful
    policy gradient in RLVR; training on the top 20% matched or beat full
    updates.
    Paper: "Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive
    Effective RL for LLM Reasoning" (arXiv 2506.01939).

    Formula: tau = the (linear-interpolated) q-quantile of the scores over all
    valid tokens of the batch; w_it ∝ 1 if s_it >= tau else 0, scaled to mean
    one over the valid tokens.
    Inputs: scores (bs, L) = token entropies (pair with ``token_entropy``);
    any real values work.
    Output: (bs, L) float32, 0 outside valid tokens, equal positive weight on
    every kept token.
    Edge cases: ties at tau are all kept, so constant scores give uniform
    weights; quantile 0 keeps every token, quantile 1 the maximal ones; a
    single valid token is always kept; non-finite scores raise ``ValueError``.
    The threshold is an exact selection (see ``selection.select_kth``), no sort.

    :param quantile: q in [0, 1]; 0.8 keeps the top 20% of tokens.
    """

    accepts_granularity = ("token",)

    def __init__(self, quantile: float = 0.8, **kwargs):
        super().__init__(**kwargs)
        if not 0 <= quantile <= 1:
            raise ValueError(f"high_entropy_tokens quantile must be in [0, 1], got {quantile!r}")
        self.quantile = float(quantile)

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        entropy, valid = actuator_scores(scores, batch, owner="high_entropy_tokens", granularity="token")
        count = int(valid_token_counts(batch).sum())  # the step's prepared counts: no pass over the mask
        if count == 0:
            return torch.zeros(entropy.shape, dtype=torch.float32, device=entropy.device)
        threshold, below = select_kth(entropy, quantile_rank(self.quantile, count), valid, count)
        # Every kept token weighs the same: count / kept makes the mean over valid tokens one. Computed in
        # the scores' dtype, then rounded to float32, as normalising the 0/1 weights would give it.
        kept = count - below
        scale = (torch.tensor(count, dtype=entropy.dtype) / torch.tensor(kept, dtype=entropy.dtype)).float()
        return kept_weights(entropy, valid, threshold, scale)


def kept_weights(
    scores: torch.Tensor, valid: torch.Tensor, threshold: torch.Tensor, scale: torch.Tensor
) -> torch.Tensor:
    """float32 ``scale`` where ``valid`` and ``scores >= threshold``, else 0: the result is the only full-size tensor.

    On the CPU it is written chunk by chunk from numpy views (see ``selection``); elsewhere in two torch ops.
    """
    xs, ms = numpy_view(scores.reshape(-1)), numpy_view(valid.reshape(-1))
    if xs is None or ms is None:
        out = torch.empty(scores.shape, dtype=torch.float32, device=scores.device)
        keep = (scores >= threshold) & valid
        return out.copy_(keep).mul_(scale.to(out.device))
    out = torch.empty(scores.shape, dtype=torch.float32)
    ws = out.numpy().reshape(-1)
    thr, factor = xs.dtype.type(threshold.item()), np.float32(scale.item())
    for start in range(0, xs.size, CHUNK):
        rows = slice(start, start + CHUNK)
        keep = np.greater_equal(xs[rows], thr)
        np.logical_and(keep, ms[rows], out=keep)
        np.copyto(ws[rows], keep)  # 1.0 / 0.0, then the scale: faster than multiplying the bools
        np.multiply(ws[rows], factor, out=ws[rows])
    return out
