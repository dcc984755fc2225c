"""Per-token signals of the policy that sampled the rollout, shape (bs, L).

Both scorers return a full (bs, L) matrix for token reweighters; positions
outside the response mask are set to 0 so garbage there (even NaN) never
reaches a statistic. The result is the only full-size tensor either builds:
the boolean response mask is the step's shared one (``response_token_mask``).
On the CPU the result is written in one numpy pass, chunk by chunk while the
chunk is in cache (zeros, then the response positions), where torch needs a
pass for the values and another for the zeros.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from dataflex_core import Scorer, register_scorer, response_token_mask

#: Values written per numpy call: a float32 chunk and its mask (1.25 MiB) stay in L2.
CHUNK = 1 << 18


def _as_float(values: torch.Tensor) -> torch.Tensor:
    """``values`` itself when float32/float64, else a float32 copy (bf16, fp16)."""
    return values if values.dtype in (torch.float32, torch.float64) else values.float()


def _flat_numpy(x: torch.Tensor) -> np.ndarray | None:
    """A contiguous CPU tensor's memory as a 1-D numpy view, or None."""
    if x.device.type != "cpu" or x.dtype == torch.bfloat16 or not x.is_contiguous():
        return None
    return x.detach().numpy().reshape(-1)


def _on_response(
    values: torch.Tensor, response: torch.Tensor, ufunc: Callable[..., np.ndarray] | None
) -> torch.Tensor | None:
    """A new tensor: ``ufunc(values)`` (``values`` when None) on the response positions, 0 elsewhere; numpy on
    the CPU. None where numpy cannot read the tensors (another device): the caller uses torch."""
    xs, ms = _flat_numpy(values), _flat_numpy(response)
    if xs is None or ms is None or ms.dtype != np.bool_ or xs.size != ms.size:
        return None
    out = torch.empty(values.shape, dtype=values.dtype)
    os_ = out.numpy().reshape(-1)
    for start in range(0, xs.size, CHUNK):
        rows = slice(start, start + CHUNK)
        chunk, where = os_[rows], ms[rows]
        chunk.fill(0)
        if ufunc is None:
            np.copyto(chunk, xs[rows], where=where)
        else:  # computed on the response positions only: garbage elsewhere is never read
            ufunc(xs[rows], out=chunk, where=where)
    return out


def _zero_outside(values: torch.Tensor, response: torch.Tensor) -> torch.Tensor:
    """``values`` (a tensor of ours) with every position outside the response set to 0, in place."""
    return torch.where(response, values, torch.zeros((), dtype=values.dtype, device=values.device), out=values)


@register_scorer("token_prob")
class TokenProbScorer(Scorer):
    """The probability the old policy gave each sampled token, pi(t) = exp(old_log_prob_t).

    Low-probability tokens produce outsized gradients; Advantage Reweighting
    scales each token's advantage by a function of pi(t) to damp them.
    Paper: "Do Not Let Low-Probability Tokens Over-Dominate in RL for LLMs"
    (arXiv 2505.12929).

    Formula: s_it = exp(old_log_probs_it) where m_it = 1, else 0.
    Inputs: ``old_log_probs`` (bs, L), ``response_mask`` (bs, L).
    Output: (bs, L) float32 in [0, 1] (float64 for float64 input).
    Edge cases: masked positions are 0 whatever they hold; log-probs are
    exponentiated in float32, so bf16 inputs keep their precision.
    """

    requires = ["old_log_probs", "response_mask"]
    timing = "post_advantage"
    granularity = "token"
    needs_groups = False

    score_range = (0.0, 1.0)

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        # One full-size result: exp into a new tensor (in place on our own float32 copy of a half input),
        # then zero outside the response in place (exp of garbage there is overwritten).
        field = batch.batch["old_log_probs"]
        log_probs = _as_float(field)
        response = response_token_mask(batch)
        if log_probs is field:
            probs = _on_response(log_probs, response, np.exp)
            if probs is not None:
                return probs
        probs = log_probs.exp_() if log_probs is not field else log_probs.exp()
        return _zero_outside(probs, response)


@register_scorer("token_entropy")
class TokenEntropyScorer(Scorer):
    """The rollout policy's entropy at each response token (verl's ``entropy`` field).

    High-entropy "forking" tokens carry most of the useful policy gradient in
    RLVR; pair with ``high_entropy_tokens`` to train on them only.
    Paper: "Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive
    Effective RL for LLM Reasoning" (arXiv 2506.01939).

    Formula: s_it = H_it = -sum_v pi(v | context_t) log pi(v | context_t) where
    m_it = 1, else 0 (verl computes H with the old log-probs).
    Inputs: ``entropy`` (bs, L), ``response_mask`` (bs, L).
    Output: (bs, L) float32 (float64 for float64 input), >= 0 for real entropies.
    Edge cases: masked positions are 0 whatever they hold.
    """

    requires = ["entropy", "response_mask"]
    timing = "post_advantage"
    granularity = "token"
    needs_groups = False
    score_range = (0.0, float("inf"))

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        field = batch.batch["entropy"]
        entropy = _as_float(field)
        if entropy is field:  # not ours to modify: one new tensor
            response = response_token_mask(batch)
            out = _on_response(entropy, response, None)
            if out is not None:
                return out
            zero = torch.zeros((), dtype=entropy.dtype, device=entropy.device)
            return torch.where(response, entropy, zero)
        return _zero_outside(entropy, response_token_mask(batch))
