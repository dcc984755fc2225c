"""Per-token signals of the policy that sampled the rollout, shape (bs, L).

Both scorers return a full (bs, L) matrix for token reweighters; positions
outside the response mask are set to 0 so garbage there (even NaN) never
reaches a statistic. The result is the only full-size tensor either builds:
the boolean response mask is the step's shared one (``response_token_mask``).
"""

from __future__ import annotations

import torch

from dataflex_core import Scorer, register_scorer, response_token_mask


def _as_float(values: torch.Tensor) -> torch.Tensor:
    """``values`` itself when float32/float64, else a float32 copy (bf16, fp16)."""
    return values if values.dtype in (torch.float32, torch.float64) else values.float()


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
        probs = log_probs.exp_() if log_probs is not field else log_probs.exp()
        return _zero_outside(probs, response_token_mask(batch))


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
            zero = torch.zeros((), dtype=entropy.dtype, device=entropy.device)
            return torch.where(response_token_mask(batch), entropy, zero)
        return _zero_outside(entropy, response_token_mask(batch))
