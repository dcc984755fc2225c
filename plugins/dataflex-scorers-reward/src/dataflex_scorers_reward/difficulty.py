"""``reward_difficulty``: a sample's own outcome reward as its score."""

from __future__ import annotations

import torch

from dataflex_core import Scorer, register_scorer

from .rewards import DEFAULT_REWARD_KEY, check_reward_key, sequence_reward


@register_scorer("reward_difficulty")
class RewardDifficultyScorer(Scorer):
    """The outcome reward of each sequence; low reward marks a hard sample.

    Paper: reward-as-difficulty is the signal behind online difficulty
    filtering / dynamic sampling in DAPO (arXiv 2503.14476); this scorer
    exposes it per sample, without group statistics.

    Formula: s_i = sum_t m_it R_it, with R = ``batch[reward_key]`` (bs, L)
    (verl puts the outcome reward on the last valid token, so this is that
    reward) and m the ``response_mask``.
    Inputs: ``reward_key`` field (default ``rm_scores``; set
    ``token_level_scores`` for batches of verl's older trainers) and
    ``response_mask``. ``requires`` lists the configured field, so the host
    fetches exactly it.
    Output: (bs,) float32 (float64 for float64 rewards).
    Edge cases: an empty row scores 0; masked positions are never read;
    a missing field raises ``KeyError`` naming it and the fix.

    :param reward_key: the token-level reward field to read.
    """

    requires = [DEFAULT_REWARD_KEY, "response_mask"]
    timing = "post_reward"
    granularity = "prompt"
    needs_groups = False

    def __init__(self, reward_key: str = DEFAULT_REWARD_KEY, **kwargs):
        super().__init__(**kwargs)
        self.reward_key = check_reward_key("reward_difficulty", reward_key)
        self.requires = [self.reward_key, "response_mask"]

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        return sequence_reward(batch, self.reward_key, "reward_difficulty")
