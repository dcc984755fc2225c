"""Per-token signals of the policy that sampled the rollout, shape (bs, L).

Both scorers return a full (bs, L) matrix for token reweighters; positions
outside the response mask are set to 0 so garbage there (even NaN) never
reaches a statistic. The result is the only full-size tensor either builds:
the boolean response mask is the step's shared one (``response_token_mask``).
"""

from __future__ import annotations

import torch

from dataflex_core import Scorer, register_scorer, response_token_mask


def _masked(values: torch.Tensor, response: torch.Tensor, fill: float) -> torch.Tensor:
    """A new float32/float64 tensor: ``values`` on response tokens, ``fill`` elsewhere (half inputs upcast)."""
    fill_value = torch.full((), fill, dtype=torch.float32, device=values.device)
    if values.dtype in (torch.float32, torch.float64):
        return torch.where(response, values, fill_value.to(values.dtype))
    own = values.float()  # a copy already: mask it in place
    return torch.where(response, own, fill_value, out=own)


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
        # exp(-inf) = 0 outside the response: one full-size result, masked and exponentiated in place.
        log_probs = _masked(batch.batch["old_log_probs"], response_token_mask(batch), float("-inf"))
        return log_probs.exp_()


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
        return _masked(batch.batch["entropy"], response_token_mask(batch), 0.0)
