"""``advantage_reweight``: damp low-probability tokens, alpha·pi(t) + (1 − alpha)."""

from __future__ import annotations

import numpy as np
import torch

from dataflex_core import Reweighter, actuator_scores, count_set, register_reweighter

from ._inputs import finish
from .selection import CHUNK, numpy_view


@register_reweighter("advantage_reweight")
class AdvantageReweightReweighter(Reweighter):
    """Scale each token by alpha·pi(t) + (1 − alpha), so rare tokens stop dominating the update.

    Low-probability tokens have large gradients and crowd out the rest;
    weighting each token's advantage by its own probability restores balance.
    Paper: "Do Not Let Low-Probability Tokens Over-Dominate in RL for LLMs"
    (arXiv 2505.12929), Advantage Reweighting.

    Formula: w_it ∝ alpha · pi_it + (1 − alpha) on valid tokens, scaled to
    mean one over the valid tokens of the batch.
    Inputs: scores (bs, L) = token probabilities pi in [0, 1] (pair with
    ``token_prob``).
    Output: (bs, L) float32, 0 outside valid tokens (response tokens of
    non-padding rows).
    Edge cases: alpha = 0 or constant pi gives uniform weights; alpha = 1 with
    every pi = 0 gives uniform weights; scores outside [0, 1] or non-finite
    raise ``ValueError``.

    :param alpha: mixing weight in [0, 1]; 0 leaves the loss unchanged.
    """

    accepts_granularity = ("token",)
    score_range = (0.0, 1.0)

    def __init__(self, alpha: float = 0.3, **kwargs):
        super().__init__(**kwargs)
        if not 0 <= alpha <= 1:
            raise ValueError(f"advantage_reweight alpha must be in [0, 1], got {alpha!r}")
        self.alpha = float(alpha)

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        prob, valid = actuator_scores(scores, batch, owner="advantage_reweight", granularity="token")
        if self.alpha < 1.0:
            fused = mixed_weights(prob, valid, self.alpha)
            if fused is not None:
                weights, total, (low, high) = fused
                self._check_range(prob, valid, low, high)
                return scale_to_mean_one(weights, valid, total)
        low, high = prob.aminmax()
        self._check_range(prob, valid, low, high)
        if self.alpha == 1.0 and not torch.where(valid, prob, 0.0).sum() > 0:
            return finish(valid.to(torch.float32), valid)  # every pi is 0: no preference, uniform
        return finish(prob.mul(self.alpha).add_(1.0 - self.alpha), valid)

    @staticmethod
    def _check_range(prob: torch.Tensor, valid: torch.Tensor, low, high) -> None:
        """``low``/``high``: the min and max over every token; the exact check only when some token (maybe an
        invalid one) is outside [0, 1]."""
        if low >= 0 and high <= 1:
            return
        outside = valid & ~((prob >= 0) & (prob <= 1))
        if outside.any():
            seen = prob[outside]
            raise ValueError(
                f"advantage_reweight reads scores as token probabilities in [0, 1], but "
                f"{int(outside.sum())} valid score(s) lie outside (min={seen.min().item():.4g}, "
                f"max={seen.max().item():.4g}); pair it with token_prob"
            )


def mixed_weights(
    prob: torch.Tensor, valid: torch.Tensor, alpha: float
) -> tuple[torch.Tensor, float, tuple[float, float]] | None:
    """``(alpha * prob + (1 - alpha), 0 outside valid)`` as a new float tensor, its sum and ``prob``'s min and max
    over every token, in one numpy pass on the CPU (each chunk is read once, while in cache); None elsewhere.

    The same float operations as the torch expression (a multiply, then an add, in the scores' dtype); the sum
    adds the chunks' sums in float64, so the weights are those of ``finish(prob * alpha + (1 - alpha), valid)``
    up to float32 rounding of the total (core's normalisation sums in torch).
    """
    xs, ms = numpy_view(prob.reshape(-1)), numpy_view(valid.reshape(-1))
    if xs is None or ms is None or ms.dtype != np.bool_ or not prob.is_contiguous() or not valid.is_contiguous():
        return None
    out = torch.empty(prob.shape, dtype=prob.dtype)
    ws = out.numpy().reshape(-1)
    a, b = xs.dtype.type(alpha), xs.dtype.type(1.0 - alpha)
    total, low, high = 0.0, np.inf, -np.inf
    for start in range(0, xs.size, CHUNK):
        rows = slice(start, start + CHUNK)
        x, w = xs[rows], ws[rows]
        np.multiply(x, a, out=w)
        np.add(w, b, out=w)
        np.copyto(w, 0, where=np.logical_not(ms[rows]))
        total += float(np.add.reduce(w))
        low, high = min(low, float(x.min())), max(high, float(x.max()))
    return out, total, (low, high)


def scale_to_mean_one(weights: torch.Tensor, valid: torch.Tensor, total: float) -> torch.Tensor:
    """float32 ``weights`` (already 0 outside ``valid``, summing to ``total``) scaled in place to mean one over
    ``valid``, as :func:`~dataflex_core.normalize_mean_one` scales: by ``count / total`` in the weights' dtype."""
    dtype, count = weights.dtype, count_set(valid)
    if count == 0:  # no valid token: the zeros normalize_mean_one gives
        return weights.float()
    factor = torch.tensor(count, dtype=dtype) / torch.tensor(total, dtype=dtype)
    xs = weights.numpy().reshape(-1)
    np.multiply(xs, xs.dtype.type(factor.item()), out=xs)
    return weights.float()
